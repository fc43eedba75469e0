"""The outbox: ready tasks' dispatches, durable with their events, out to the broker."""

from __future__ import annotations

import logging
import time
from uuid import UUID

from flowforge import observe
from flowforge.aggregates.definition import MAX_SECONDS
from flowforge.app import dispatch, redispatch
from flowforge.app.arguments import non_negative
from flowforge.app.core import ServiceCore
from flowforge.app.ports import DispatchPublisher, QueueProbe
from flowforge.app.queries import REAP_BATCH
from flowforge.app.scope import EVERY_RUN, Scope

log = logging.getLogger(__name__)


class Outbox:
    """Ready tasks' dispatches out to the broker, and the net for lost ones."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        #: The redispatch net's candidates of the last pass (``app/redispatch.py``).
        self._suspects: dict[UUID, float] = {}

    def publish_pending_dispatches(
        self,
        publisher: DispatchPublisher,
        limit: int = 500,
        *,
        scope: Scope | None = None,
    ) -> int:
        """Publish up to ``limit`` pending outbox rows (only those of the runs, or else of
        the task types, that ``scope`` names, if given: ``app/scope.py``); how many were
        delivered.

        One transaction selects the rows (``FOR UPDATE SKIP LOCKED``: parallel publishers
        divide them), publishes them with confirms, and marks them delivered only after
        the broker's ack. If the publish raises, the transaction rolls back and every
        row stays pending for the next sweep.
        """
        with self._core.writes() as writes:
            scope = scope or EVERY_RUN
            rows = writes.outbox.pending(
                limit, scope.task_types, scope.run_ids, traced=observe.announce.traced
            )
            if not rows:
                return 0
            publisher.publish(
                [dispatch.message_for(row, self._core.deployment_id) for row in rows],
                headers={row.dispatch_id: dispatch.headers_for(row) for row in rows},
            )
            writes.outbox.mark_published([row.dispatch_id for row in rows])
        return len(rows)

    def redispatch_stalled(
        self,
        older_than_seconds: float,
        *,
        scope: Scope | None = None,
        reason: str = redispatch.RUNNER_STARTED,
    ) -> list[UUID]:
        """A new dispatch, unconditionally, for every task READY for over
        ``older_than_seconds`` with no dispatch pending or published within that time
        (only of the runs ``scope`` names, if it names runs).

        An embedded runner's start (``ProcessGroup``): its in-process channel starts
        empty, so every dispatch of its own ready tasks died with the process that held
        it. The scheduler's net is :meth:`redispatch_lost`, which asks the broker first.
        """
        older_than = non_negative(older_than_seconds, "older_than_seconds", MAX_SECONDS)
        with self._core.writes() as writes:
            at = writes.now()
            rows = writes.outbox.stalled_ready(
                older_than, REAP_BATCH, (scope or EVERY_RUN).run_ids
            )
            for row in rows:
                writes.outbox.redispatch(row, reason, at=at)
        self._announce(reason, len(rows))
        return [row.id for row in rows]

    def redispatch_lost(
        self, older_than_seconds: float, probe: QueueProbe, *, scope: Scope | None = None
    ) -> list[UUID]:
        """The scheduler's net: a new dispatch only for tasks whose dispatch is gone.

        Per task type with a stalled task (READY, last dispatch published over
        ``older_than_seconds`` ago, none pending), the READY tasks whose dispatches are
        all published are counted and the broker is asked how many messages the type's
        queue holds (``probe``); a shortfall is that many lost dispatches, and the
        shortfall's oldest stalled tasks (of ``scope``'s runs, if it names runs) are
        redispatched once they have stayed candidates for ``confirm_after`` the period
        (the rule and its reasons: ``app/redispatch.py``). A task waiting behind others
        in its queue, or for a worker of its type, is never redispatched.
        """
        older_than = non_negative(older_than_seconds, "older_than_seconds", MAX_SECONDS)
        with self._core.reads() as reads:
            waiting = reads.outbox_waiting_of_stalled_types(older_than)
        queued = {task_type: _messages(probe, task_type) for task_type in waiting}
        suspects, chosen, now = self._suspects, [], time.monotonic()
        self._suspects = {}
        confirm = redispatch.confirm_after(older_than)
        with self._core.writes() as writes:
            if not writes.outbox.take_redispatch_net():
                # Another scheduler's pass holds the net: the suspects are forgotten, so a
                # task that pass replaced is never confirmed here on stale counts.
                return []
            at = writes.now()
            for task_type, count in sorted(waiting.items()):
                short = redispatch.deficit(count, queued[task_type])
                if not short:
                    continue
                rows = writes.outbox.stalled_of_type(
                    task_type, older_than, min(short, REAP_BATCH), (scope or EVERY_RUN).run_ids
                )
                tally = redispatch.Tally(count, queued[task_type], [row.id for row in rows])
                ripe, later = redispatch.choose(tally, suspects, now, confirm)
                self._suspects.update(later)
                ripe_ids = set(ripe)
                chosen += [row for row in rows if row.id in ripe_ids]
            for row in chosen:
                writes.outbox.redispatch(row, redispatch.QUEUE_SHORT, at=at)
        self._announce(redispatch.QUEUE_SHORT, len(chosen))
        return [row.id for row in chosen]

    @staticmethod
    def _announce(reason: str, count: int) -> None:
        if count:
            observe.announce.tasks_redispatched(reason, count)
            log.warning("ready tasks redispatched", extra={"count": count, "reason": reason})


def _messages(probe: QueueProbe, task_type: str) -> int | None:
    """The messages the type's queue holds; None if the broker could not say (a queue
    that does not exist holds none: a purged-and-deleted queue lost them all)."""
    state = probe(task_type)
    return None if state is None else state.messages
