"""The outbox: ready tasks' dispatches, durable with their events, out to the broker."""

from __future__ import annotations

import logging
from collections.abc import Collection
from uuid import UUID

from flowforge.aggregates.definition import MAX_SECONDS
from flowforge.app import dispatch
from flowforge.app.commands import non_negative
from flowforge.app.core import ServiceCore
from flowforge.app.ports import DispatchPublisher
from flowforge.app.queries import REAP_BATCH

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
        task_types: Collection[str] | None = None,
    ) -> int:
        """Publish up to ``limit`` pending outbox rows (only of ``task_types``, if given);
        how many were delivered.

        One transaction selects the rows (``FOR UPDATE SKIP LOCKED``: parallel publishers
        divide them), publishes them with confirms, and marks them delivered only after
        the broker's ack. If the publish raises, the transaction rolls back and every
        row stays pending for the next sweep.
        """
        with self._core.writes() as writes:
            rows = writes.outbox.pending(limit, task_types)
            if not rows:
                return 0
            publisher.publish(
                [dispatch.message_for(row, self._core.deployment_id) for row in rows]
            )
            writes.outbox.mark_published([row.dispatch_id for row in rows])
        return len(rows)

    def redispatch_stalled(self, older_than_seconds: float) -> list[UUID]:
        """A new dispatch for every task READY for over ``older_than_seconds`` with no
        dispatch pending or published within that time.

        The safety net for a dispatch that was lost after its publish was confirmed: one
        dead-lettered past the queue's delivery limit, or one held in memory by an
        embedded process that exited. A dispatch that was only slow is duplicated, which
        the claim makes harmless.
        """
        older_than = non_negative(older_than_seconds, "older_than_seconds", MAX_SECONDS)
        with self._core.writes() as writes:
            at = writes.now()
            rows = writes.outbox.stalled_ready(older_than, REAP_BATCH)
            for row in rows:
                writes.outbox.enqueue(
                    row.id, row.task_key, row.task_type, row.fencing_token, at=at
                )
        if rows:
            log.warning("stalled ready tasks redispatched", extra={"count": len(rows)})
        return [row.id for row in rows]
