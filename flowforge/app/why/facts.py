"""The facts ``flowforge why`` reasons from: the task, its run, the tasks it names (its
direct upstream, the run's failed tasks), its outbox rows and the audit log up to the
moment asked about. What is read is what the task's answer needs, never the run's every
task or event: ``why`` of one task costs the same in a run of 10 tasks or 50,000.

Now, they come from the projected tables and the database's clock; as of a past moment,
from the event log alone, by reconstituting each of those aggregates at its last
version no later than that moment, from its own events. The outbox is delivery state,
not part of the log; as of a past moment its rows are read by their timestamps
(created, published).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
from flowforge.app.results import (
    AuditEntry,
    DispatchView,
    MappedTaskView,
    TaskRunView,
    WorkflowRunView,
)
from flowforge.app.service import FlowForge
from flowforge.app.why.mapped_then import mapped_tasks_as_of

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
    #: The run's tasks the explanation names, by key: this one, its direct upstream,
    #: and the run's failed tasks (``facts._relatives``); never the run's every task.
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
    #: The mapped tasks (``map_over``) among its upstream, which have no row of their
    #: own: their upstream's state and their elements' counts (then, as of a past
    #: moment: ``mapped_then.mapped_tasks_as_of``).
    mapped: Mapping[str, MappedTaskView] = field(default_factory=dict)


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
    """The facts now: the tables, the outbox, the log, and the database's clock. What is
    read is what the task's answer needs, at any run size: the task's own events, its
    run's, and the rows of its upstream tasks and of the run's failed ones."""
    row = app.get_task_run(task_run_id)
    siblings = {t.task_key: TaskView.of(t) for t in _relatives(app, row)}
    siblings[row.task_key] = TaskView.of(row)
    run = _run(app, row.workflow_run_id, siblings.values())
    mapped: dict[str, MappedTaskView] = {}
    if any(key not in siblings for key in row.depends_on):  # a mapped task has no row
        full = app.get_workflow_run(row.workflow_run_id)
        mapped = {v.key: v for v in app.mapped_tasks(full) if v.key in row.depends_on}
    return Situation(
        at=app.database_now(),
        live=True,
        task=TaskView.of(row),
        run=RunView.of(run),
        siblings=siblings,
        task_log=app.history(row.id),
        run_log=app.run_transitions(run.id),
        dispatches=[_dispatch(d) for d in app.dispatches_of(row.id)],
        hold=app.hold_of(row),
        mapped=mapped,
    )


#: How many of a run's failed tasks ``why`` reads (to say which failure ended the run,
#: and whether one is upstream of the task beyond its direct upstream).
FAILED_READ = 100


def _run(app: FlowForge, run_id: UUID, tasks: Iterable[TaskView]) -> WorkflowRunView:
    """The run, with its definition's tasks only if a failure needs them (which tasks
    depend on a failed one: ``sentences.failed_upstream``); a big run's definition is
    most of what ``why`` would otherwise read."""
    if any(t.failed_for_good for t in tasks):
        return app.get_workflow_run(run_id)
    return app.get_workflow_run_brief(run_id)


def _relatives(app: FlowForge, row: TaskRunView) -> list[TaskRunView]:
    """The tasks of the run a task's explanation names: its direct upstream, and the
    run's failed tasks (at most ``FAILED_READ``)."""
    run_id = row.workflow_run_id
    return [
        *app.task_runs_by_keys(run_id, row.depends_on),
        *app.task_runs_in_state(run_id, "failed", FAILED_READ),
    ]


def situation_as_of(app: FlowForge, task_run_id: UUID, at: datetime) -> Situation | None:
    """The facts at ``at``, from the log: the task, its run, and the tasks it names
    (:func:`_relatives`: a task failed for good then is failed still), each
    reconstituted at its last version with a timestamp no later than ``at``, from its
    own events alone; None if the task or its run did not exist yet."""
    row = app.get_task_run(task_run_id)
    task_log = as_of.fold(app.history(task_run_id), at)
    if not task_log.entries:
        return None
    repository = app.events.repository
    task: TaskRun = repository.get(task_run_id, version=task_log.entries[-1].version)
    siblings = {row.task_key: TaskView.of(task)}
    relatives = _relatives(app, row)
    known = {other.task_key for other in relatives}
    for other in relatives:
        last = as_of.fold(app.history(other.id), at).entries
        if last and other.task_key not in siblings:
            then: TaskRun = repository.get(other.id, version=last[-1].version)
            siblings[other.task_key] = TaskView.of(then)
    # The run was created with its tasks: it existed, at version 1 at least, if the
    # task did.
    run_log = [e for e in app.run_transitions(row.workflow_run_id) if e.at <= at]
    version = run_log[-1].version if run_log else 1
    run = RunView.of(repository.get(row.workflow_run_id, version=version))
    unread = [key for key in row.depends_on if key not in known]  # a mapped task has no row
    return Situation(
        at=at,
        live=False,
        task=siblings[row.task_key],
        run=run,
        siblings=siblings,
        task_log=task_log.entries,
        run_log=run_log,
        dispatches=[
            _dispatch(d, at) for d in app.dispatches_of(task_run_id) if d.created_at <= at
        ],
        mapped=mapped_tasks_as_of(app, row.workflow_run_id, unread, at) if unread else {},
    )


def _dispatch(row: DispatchView, at: datetime | None = None) -> Dispatch:
    published = row.published_at
    if at is not None and published is not None and published > at:
        published = None
    return Dispatch(row.created_at, published, row.fencing_token, row.reason)
