"""The scheduler's pass: reap expired leases, advance every active run, redispatch."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from flowforge.app.outbox import Outbox
from flowforge.app.queries import REAP_BATCH
from flowforge.app.results import ScheduleSummary

#: A ready task undispatched for this long gets a new dispatch (see redispatch_stalled).
REDISPATCH_AFTER_S = 300.0


class Scheduling(Outbox):
    def schedule_once(
        self,
        *,
        redispatch_after: float = REDISPATCH_AFTER_S,
        covers: Callable[[UUID], bool] | None = None,
    ) -> ScheduleSummary:
        """One scheduler pass: reap expired leases, advance every active run (only those
        ``covers`` accepts, if given), and redispatch ready tasks whose dispatch was lost
        (see :meth:`redispatch_stalled`)."""
        summary = ScheduleSummary(reaped=len(self.reap_expired_leases()))
        with self._reads() as reads:
            runs = reads.runs_to_advance()
        for run_id in runs:
            if covers is None or covers(run_id):
                summary.add(self.advance_workflow_run(run_id))
        summary.redispatched = len(self.redispatch_stalled(redispatch_after))
        return summary

    def reap_expired_leases(self) -> list[UUID]:
        """Reclaim every task whose lease expired by the database's clock."""
        candidates = self.expired_leases(REAP_BATCH)
        return [task_run_id for task_run_id in candidates if self.reclaim_task_run(task_run_id)]
