"""A worker's claim: the task's row, its claim and its lease, or why nothing was claimed.

The claim itself needs no read first: it takes the row's own lease, and brings the run's
definition and inputs back in its round trip the first time the worker meets the run.
When it claims nothing, the fallback reads the row to say why (a duplicate or stale
dispatch, a claim lost to another worker), and claims a ready row created before tasks
recorded their lease (schema version 4) with its definition's lease. Either way the
dispatch is then acked without running; the log line says which.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, TypeAlias

from flowforge import observe
from flowforge.aggregates.dispatch import DispatchMessage
from flowforge.aggregates.states import TaskRunState
from flowforge.app.results import Claim, TaskRunView
from flowforge.app.service import FlowForge
from flowforge.processes.run_cache import RunCache

# The worker's log: an operator follows a worker's lines under one logger name.
log = logging.getLogger("flowforge.processes.worker")

#: A claimed task: its row, the claim (attempt, fencing token) and its lease in seconds.
Claimed: TypeAlias = tuple[TaskRunView, Claim, float]


class Claimer:
    """Claims tasks for one worker, remembering their runs in the worker's cache."""

    def __init__(self, app: FlowForge, worker_id: str, runs: RunCache) -> None:
        self.app = app
        self.worker_id = worker_id
        self._runs = runs

    def claim(self, task_run_id: uuid.UUID) -> Claimed | str:
        """Claim the task with its own lease, no read first: the claimed row, the claim
        and the lease; or, when nothing was claimed, what happened instead. The run's
        definition and inputs come back in the claim's round trip the first time the
        worker meets the run."""
        row, run = self.app.claim_task_run_and_its_run(
            task_run_id, self.worker_id, unless_known=self._runs.latest()
        )
        if run is not None:
            self._runs.remember(run)
        return self.claimed(task_run_id, row)

    def claim_all(self, messages: Sequence[DispatchMessage]) -> list[TaskRunView | None]:
        """Claim a batch's tasks in one transaction: each one's claimed row, or ``None``
        (then :meth:`claimed` says what happened instead)."""
        rows, runs = self.app.claim_task_runs_and_their_runs(
            [message.task_run_id for message in messages],
            self.worker_id,
            unless_known=self._runs.latest(),
        )
        for run in runs:
            self._runs.remember(run)
        return rows

    def claimed(self, task_run_id: uuid.UUID, row: TaskRunView | None) -> Claimed | str:
        """What a claim that returned ``row`` gives: the row, the claim and its lease;
        or, when nothing was claimed, what happened instead."""
        if row is not None:
            assert row.lease_seconds is not None  # the claim took the row's own lease
            return row, Claim.of(row), row.lease_seconds
        # Not claimed: a duplicate or stale dispatch, a claim lost to another worker,
        # or a row without a lease of its own. Its row says which; a ready one without a
        # lease is claimed with its definition's lease. Such a row is still written in
        # a rolling upgrade past schema version 5: a FlowForge before 5 checks the schema
        # when it opens the database only, so one started before `db migrate` goes on
        # creating tasks without the column's value (docs/data-model.md, lease_seconds).
        task = self._task(task_run_id)
        if task.task_state is not TaskRunState.READY:
            return self.skipped(task, "not ready")
        if task.lease_seconds is not None:
            # Ready with a lease of its own, yet not claimed: a concurrency limit
            # refused it and holds its dispatch (docs/scheduling/limits.md); a freed
            # slot sends it again. Claiming again here would only be refused again.
            return self.skipped(task, "held by a concurrency limit")
        lease_seconds = self._runs.facts(task.workflow_run_id).definition.lease_seconds_for(
            task.task_key
        )
        claim = self.app.claim_task_run(task.id, self.worker_id, lease_seconds)
        if claim is None:
            return self.skipped(task, "claimed elsewhere")
        return task, claim, lease_seconds

    def _task(self, task_run_id: uuid.UUID) -> TaskRunView:
        """The task's row, when the claim claimed nothing; its run's definition and
        inputs are read in the same round trip unless the worker knows them."""
        task, run = self.app.task_run_and_its_run(task_run_id, unless_known=self._runs.latest())
        if run is not None:
            self._runs.remember(run)
        return task

    def skipped(self, task: TaskRunView, why: str) -> str:
        """Log a dispatch acked without running its handler; what happened."""
        log.info(
            "duplicate or stale dispatch acked without running",
            extra=self._extra(task_run_id=str(task.id), state=task.state, reason=why),
        )
        observe.announce.claim_skipped(why)
        return "skipped"

    def duplicate(self, message: DispatchMessage) -> str:
        """Log a task dispatched twice in one batch: the claim of the first decides for
        both, and the second is acked without running."""
        log.info(
            "duplicate or stale dispatch acked without running",
            extra=self._extra(task_run_id=str(message.task_run_id), reason="twice in a batch"),
        )
        observe.announce.claim_skipped("twice in a batch")
        return "skipped"

    def _extra(self, **fields: Any) -> dict[str, Any]:
        return {"worker_id": self.worker_id, **fields}
