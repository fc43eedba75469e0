"""The facts ``flowforge why`` reasons from: the task, its run, its siblings, its outbox
rows and the audit log up to the moment asked about.

Now, they come from the projected tables and the database's clock; as of a past moment,
from the event log alone, by reconstituting every aggregate of the run at its last
version no later than that moment. The outbox is delivery state, not part of the log; as
of a past moment its rows are read by their timestamps (created, published).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.base import view
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.task_run import TaskRun, TaskRunChanges, TaskRunFixed
from flowforge.aggregates.workflow_run import WorkflowRun, WorkflowRunChanges, WorkflowRunFixed
from flowforge.app import as_of
from flowforge.app.concurrency_limits import Hold
from flowforge.app.ports import QueueState
from flowforge.app.results import AuditEntry, DispatchView, TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge

#: The states a run ends in, from its machine.
TERMINAL_RUN_STATES = frozenset(state.value for state in WORKFLOW_RUN_MACHINE.terminal)


# --- the facts ---------------------------------------------------------------------------


@view
class TaskView(TaskRunFixed, TaskRunChanges):
    """One task run as ``why`` needs it: every declared field, from its row or its
    reconstituted aggregate (so a newly declared field is here without an edit)."""

    id: UUID
    state: str

    @classmethod
    def of(cls, source: TaskRunView | TaskRun) -> TaskView:
        return cls(id=source.id, **task_run.DECLARATION.values(source))

    @property
    def failed_for_good(self) -> bool:
        return self.state == "failed" and self.attempt >= self.max_attempts


@view
class RunView(WorkflowRunFixed, WorkflowRunChanges):
    """One workflow run as ``why`` needs it: every declared field."""

    id: UUID
    state: str

    @classmethod
    def of(cls, source: WorkflowRunView | WorkflowRun) -> RunView:
        return cls(id=source.id, **workflow_run.DECLARATION.values(source))


@dataclass(frozen=True, slots=True)
class Dispatch:
    created_at: datetime
    published_at: datetime | None
    fencing_token: int
    #: Why the redispatch net wrote it (``app/redispatch.py``); None: a transition's.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything an explanation is built from, as of one moment."""

    at: datetime
    #: False: as of a past moment, from the log (``--at``).
    live: bool
    task: TaskView
    run: RunView
    #: The run's tasks by key (including this one).
    siblings: Mapping[str, TaskView]
    #: This task's audit entries up to ``at``, oldest first.
    task_log: Sequence[AuditEntry]
    #: The run's own audit entries (not its tasks') up to ``at``.
    run_log: Sequence[AuditEntry]
    #: This task's dispatches as they stood at ``at``, oldest first.
    dispatches: Sequence[Dispatch]
    #: No broker is configured: only `flowforge run` runs tasks, in its own process.
    embedded: bool = False
    #: The task type's queue on the broker now (live, with a broker that answered).
    queue: QueueState | None = None
    #: The concurrency limit that refused the task's last claim, if it is still held
    #: (live only: holds are delivery state, not in the log).
    hold: Hold | None = None


@dataclass(slots=True)
class Explanation:
    task_run_id: UUID
    workflow_run_id: UUID
    task_key: str
    state: str
    #: A stable code for scripts: waiting_for_upstream, retry_backoff, running, ...
    reason: str
    headline: str
    details: list[str] = field(default_factory=list)
    as_of: datetime | None = None
    from_log: bool = False
    attempt: int | None = None
    max_attempts: int | None = None
    upstream: list[dict[str, Any]] = field(default_factory=list)


# --- gathering the facts -----------------------------------------------------------------


def situation_now(app: FlowForge, task_run_id: UUID) -> Situation:
    """The facts now: the tables, the outbox, the log, and the database's clock."""
    row = app.get_task_run(task_run_id)
    run = app.get_workflow_run(row.workflow_run_id)
    entries = app.run_history(run.id)
    return Situation(
        at=app.database_now(),
        live=True,
        task=TaskView.of(row),
        run=RunView.of(run),
        siblings={t.task_key: TaskView.of(t) for t in app.task_runs(run.id)},
        task_log=[e for e in entries if e.aggregate_id == row.id],
        run_log=[e for e in entries if e.aggregate == "WorkflowRun"],
        dispatches=[_dispatch(d) for d in app.dispatches_of(row.id)],
        hold=app.hold_of(row),
    )


def situation_as_of(app: FlowForge, task_run_id: UUID, at: datetime) -> Situation | None:
    """The facts at ``at``, from the log: each aggregate of the run reconstituted at its
    last version with a timestamp no later than ``at``; None if it did not exist yet."""
    row = app.get_task_run(task_run_id)
    then = as_of.fold(app.run_history(row.workflow_run_id), at)
    entries = then.entries
    versions = {aggregate_id: e.version for aggregate_id, e in then.last.items()}
    if row.workflow_run_id not in versions or task_run_id not in versions:
        return None
    repository = app.events.repository
    run: WorkflowRun = repository.get(
        row.workflow_run_id, version=versions.pop(row.workflow_run_id)
    )
    tasks: list[TaskRun] = [repository.get(i, version=v) for i, v in versions.items()]
    siblings = {t.task_key: TaskView.of(t) for t in tasks}
    return Situation(
        at=at,
        live=False,
        task=siblings[row.task_key],
        run=RunView.of(run),
        siblings=siblings,
        task_log=[e for e in entries if e.aggregate_id == task_run_id],
        run_log=[e for e in entries if e.aggregate == "WorkflowRun"],
        dispatches=[
            _dispatch(d, at) for d in app.dispatches_of(task_run_id) if d.created_at <= at
        ],
    )


def _dispatch(row: DispatchView, at: datetime | None = None) -> Dispatch:
    published = row.published_at
    if at is not None and published is not None and published > at:
        published = None
    return Dispatch(row.created_at, published, row.fencing_token, row.reason)
