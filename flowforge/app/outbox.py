"""The outbox: ready tasks' dispatches, durable with their events, out to the broker."""

from __future__ import annotations

import logging
from uuid import UUID

from flowforge.aggregates.definition import MAX_SECONDS
from flowforge.app import dispatch
from flowforge.app.arguments import non_negative
from flowforge.app.core import ServiceCore
from flowforge.app.ports import DispatchPublisher
from flowforge.app.queries import REAP_BATCH
from flowforge.app.scope import EVERY_RUN, Scope

log = logging.getLogger(__name__)


class Outbox:
    """Ready tasks' dispatches out to the broker, and the net for lost ones."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

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
            rows = writes.outbox.pending(limit, scope.task_types, scope.run_ids)
            if not rows:
                return 0
            publisher.publish(
                [dispatch.message_for(row, self._core.deployment_id) for row in rows],
                headers={row.dispatch_id: dispatch.headers_for(row) for row in rows},
            )
            writes.outbox.mark_published([row.dispatch_id for row in rows])
        return len(rows)

    def redispatch_stalled(
        self, older_than_seconds: float, *, scope: Scope | None = None
    ) -> list[UUID]:
        """A new dispatch for every task READY for over ``older_than_seconds`` with no
        dispatch pending or published within that time (only of the runs ``scope``
        names, if it names runs).

        The safety net for a dispatch that was lost after its publish was confirmed: one
        dead-lettered past the queue's delivery limit, or one held in memory by an
        embedded process that exited. A dispatch that was only slow is duplicated, which
        the claim makes harmless.
        """
        older_than = non_negative(older_than_seconds, "older_than_seconds", MAX_SECONDS)
        with self._core.writes() as writes:
            at = writes.now()
            rows = writes.outbox.stalled_ready(
                older_than, REAP_BATCH, (scope or EVERY_RUN).run_ids
            )
            for row in rows:
                writes.outbox.enqueue(
                    row.id, row.task_key, row.task_type, row.fencing_token, at=at
                )
        if rows:
            log.warning("stalled ready tasks redispatched", extra={"count": len(rows)})
        return [row.id for row in rows]
