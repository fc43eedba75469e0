"""What the application service returns: its commands' results, and its views of runs,
tasks, schedules and dispatches.

The views are the application's own types, never the store's rows
(``projections/tables.py``): the CLI, the UI and the processes read these, so a column
can change in the store without touching them. Each view is made from its row by one
function here (one constructor call, no dict: the worker's claim makes one per task).
``tests/unit/app/test_views.py`` checks that no public method of ``FlowForge`` returns a
store type.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.projections import tables

if TYPE_CHECKING:  # the store's queries import its driver; these functions only name them
    from flowforge.projections import reads


@dataclass(frozen=True, slots=True)
class Claim:
    """A won claim: the fencing token every later write of this attempt must carry."""

    task_run_id: UUID
    fencing_token: int
    attempt: int
    lease_expires_at: datetime

    @classmethod
    def of(cls, row: tables.TaskRunRow | TaskRunView) -> Claim:
        """The claim a claimed (running) row records."""
        assert row.lease_expires_at is not None
        return cls(row.id, row.fencing_token, row.attempt, row.lease_expires_at)


@dataclass(frozen=True, slots=True)
class StartedRun:
    run_id: UUID
    #: False when a run with the same idempotency key already existed (nothing appended).
    created: bool


@dataclass(slots=True)
class AdvanceResult:
    """What one ``advance_workflow_run`` changed."""

    run_id: UUID
    started: bool = False
    promoted: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    made_ready: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished_as: str | None = None
    #: A delayed run left pending: its start time has not come (the database's clock).
    waiting_to_start: bool = False


@dataclass(slots=True)
class ScheduleSummary:
    """What one ``schedule_once`` pass changed."""

    reaped: int = 0
    timed_out: int = 0
    promoted: int = 0
    retried: int = 0
    runs_advanced: int = 0
    runs_finished: int = 0
    cancelled: int = 0
    redispatched: int = 0
    #: Delayed runs advanced before their start time (a new one: a new timer).
    waiting_to_start: int = 0
    #: Runs started by cron schedules (``app/cron_schedules.py``).
    fired: int = 0

    def add(self, result: AdvanceResult) -> None:
        self.runs_advanced += 1
        self.waiting_to_start += result.waiting_to_start
        self.promoted += len(result.promoted)
        self.retried += len(result.retried)
        self.cancelled += len(result.cancelled)
        self.runs_finished += result.finished_as is not None


@dataclass(frozen=True, slots=True)
class FiredRun:
    """One fire of a cron schedule: its nominal fire time and the run it created."""

    schedule: str
    fire_at: datetime
    run_id: UUID


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One transition in the audit log, as an operator reads it."""

    at: datetime
    aggregate: str
    aggregate_id: UUID
    version: int
    event: str
    transition: str
    source: str | None
    target: str
    actor: str
    task_key: str | None = None
    attempt: int | None = None
    fencing_token: int | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    retry_due_at: datetime | None = None
    result: Any = None
    error: dict[str, str] | None = None
    #: A run's creation: the run it reruns.
    rerun_of: UUID | None = None
    #: A run's creation: a delayed run's start time.
    start_at: datetime | None = None
    #: A ``carry_over``: where the result was produced (run, task run, attempt).
    carried_from_run_id: UUID | None = None
    carried_from_task_run_id: UUID | None = None
    carried_from_attempt: int | None = None
    #: A task's lost workers so far (its leases that expired), as the event recorded.
    worker_losses: int = 0


@dataclass(frozen=True, slots=True)
class MappedTaskView:
    """A mapped task (``map_over``) of a run: it has no row of its own, only elements
    (``Queries.mapped_tasks``)."""

    key: str
    #: The task whose list it maps over, and that task's state (None: no such row).
    map_over: str
    upstream_state: str | None
    #: How many elements it expanded into (None: not yet expanded), by state.
    elements: int | None
    counts: dict[str, int]
    #: Its derived state (``aggregates.mapping.mapped_state``).
    state: str

    @property
    def key_range(self) -> str:
        """``process[0..9999]`` (``process[]`` for an empty list, ``process`` unexpanded)."""
        if self.elements is None:
            return self.key
        return f"{self.key}[0..{self.elements - 1}]" if self.elements else f"{self.key}[]"


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run's tasks at any size (``Queries.run_summary``): how many are in each state,
    and the few of each state a user acts on (failed, running, retrying, ready,
    pending), the longest waiting first."""

    #: Tasks by state; a state no task is in is absent.
    counts: dict[str, int]
    #: The tasks named, by state, in the order a user acts on them.
    notable: dict[str, list[TaskRunView]]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class RebuildReport:
    events: int
    workflow_runs: int
    task_runs: int


# --- views: what the service's queries return -------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRunView:
    """A task run now: its definition's fields, its state and its current attempt.

    Every column, because ``flowforge db rebuild`` checks each against the log."""

    id: UUID
    workflow_run_id: UUID
    task_key: str
    task_type: str
    depends_on: list[str]
    max_attempts: int
    lease_seconds: float | None
    timeout_seconds: float | None
    max_running: int | None
    max_worker_losses: int | None
    map_index: int | None
    map_item: Any
    state: str
    fencing_token: int
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    deadline_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    retry_due_at: datetime | None
    result: Any
    error: dict[str, str] | None
    carried_from_run_id: UUID | None
    carried_from_task_run_id: UUID | None
    carried_from_attempt: int | None
    worker_losses: int
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def task_state(self) -> TaskRunState:
        return TaskRunState(self.state)


@dataclass(frozen=True, slots=True)
class WorkflowRunView:
    """A workflow run now: its workflow, inputs, state and times."""

    id: UUID
    workflow_name: str
    definition: dict[str, Any]
    inputs: dict[str, Any]
    idempotency_key: str | None
    rerun_of: UUID | None
    start_at: datetime | None
    trace_context: dict[str, str] | None
    state: str
    started_at: datetime | None
    finished_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def run_state(self) -> WorkflowRunState:
        return WorkflowRunState(self.state)


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A cron schedule: what it starts, when, and what it last started."""

    id: UUID
    name: str
    cron: str
    timezone: str
    workflow_name: str
    definition: dict[str, Any]
    inputs: dict[str, Any]
    catch_up: int
    state: str
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_run_id: UUID | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DispatchView:
    """One dispatch of a task (the outbox): written with its attempt's fencing token,
    ``published_at`` once the broker confirmed it."""

    dispatch_id: UUID
    task_run_id: UUID
    task_key: str
    task_type: str
    fencing_token: int
    created_at: datetime
    published_at: datetime | None
    #: Why the redispatch net gave the task this dispatch (``app/redispatch.py``);
    #: None on the dispatch of a transition.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class OverdueAttempt:
    """A running attempt past its execution timeout: the task, the token of the attempt
    (the timeout fails only that attempt), and its run."""

    task_run_id: UUID
    fencing_token: int
    workflow_run_id: UUID


@dataclass(frozen=True, slots=True)
class BacklogView:
    """What waits, now: unfinished tasks by state; dispatches written and not yet
    confirmed by the broker, and how long the oldest has waited (0 with none)."""

    tasks_by_state: dict[str, int]
    outbox_pending: int
    outbox_oldest_age_s: float


@dataclass(frozen=True, slots=True)
class TaskOutline:
    """A task run in outline: what a large run's page counts and colours of each task."""

    task_key: str
    state: str
    attempt: int


def task_run_view(row: tables.TaskRunRow) -> TaskRunView:
    return TaskRunView(
        row.id, row.workflow_run_id, row.task_key, row.task_type, row.depends_on,
        row.max_attempts, row.lease_seconds, row.timeout_seconds, row.max_running,
        row.max_worker_losses, row.map_index, row.map_item, row.state, row.fencing_token,
        row.attempt, row.lease_owner, row.lease_expires_at, row.deadline_at, row.started_at,
        row.finished_at, row.retry_due_at, row.result, row.error, row.carried_from_run_id,
        row.carried_from_task_run_id, row.carried_from_attempt, row.worker_losses,
        row.version, row.created_at, row.updated_at,
    )  # fmt: skip


def workflow_run_view(row: tables.WorkflowRunRow) -> WorkflowRunView:
    return WorkflowRunView(
        row.id, row.workflow_name, row.definition, row.inputs, row.idempotency_key,
        row.rerun_of, row.start_at, row.trace_context, row.state, row.started_at,
        row.finished_at, row.version, row.created_at, row.updated_at,
    )  # fmt: skip


def schedule_view(row: tables.ScheduleRow) -> ScheduleView:
    return ScheduleView(
        row.id, row.name, row.cron, row.timezone, row.workflow_name, row.definition,
        row.inputs, row.catch_up, row.state, row.next_fire_at, row.last_fire_at,
        row.last_run_id, row.version, row.created_at, row.updated_at,
    )  # fmt: skip


def dispatch_view(row: tables.OutboxRow) -> DispatchView:
    return DispatchView(
        row.dispatch_id, row.task_run_id, row.task_key, row.task_type, row.fencing_token,
        row.created_at, row.published_at, row.reason,
    )  # fmt: skip


def overdue_attempt(row: reads.OverdueTask) -> OverdueAttempt:
    return OverdueAttempt(row.task_run_id, row.fencing_token, row.workflow_run_id)


def backlog_view(row: reads.Backlog) -> BacklogView:
    return BacklogView(row.tasks_by_state, row.outbox_pending, row.outbox_oldest_age_s)


def claimed_views(
    claimed: tuple[tables.TaskRunRow | None, tables.WorkflowRunRow | None],
) -> tuple[TaskRunView | None, WorkflowRunView | None]:
    """A worker's claim of one task (``claim_task_run_and_its_run``) as views."""
    task, run = claimed
    return (
        None if task is None else task_run_view(task),
        None if run is None else workflow_run_view(run),
    )


def claims_views(
    claimed: tuple[list[tables.TaskRunRow | None], list[tables.WorkflowRunRow]],
) -> tuple[list[TaskRunView | None], list[WorkflowRunView]]:
    """A worker's batch of claims (``claim_task_runs_and_their_runs``) as views."""
    tasks, runs = claimed
    return (
        [None if t is None else task_run_view(t) for t in tasks],
        [workflow_run_view(r) for r in runs],
    )


def schedule_views(rows: list[tables.ScheduleRow]) -> list[ScheduleView]:
    return [schedule_view(row) for row in rows]


# --- the wake-up bells: what ``FlowForge.listening`` yields ------------------------------


class WakeupBell(Protocol):
    """A wake-up that is not lost between rings: :meth:`wait` returns at once if the
    bell rang since the last wait, else sleeps until a ring or the timeout."""

    def ring(self) -> None: ...

    def wait(self, seconds: float) -> bool:
        """True if rung (and clears it); False if ``seconds`` passed first."""
        ...


class WakeupBells(Protocol):
    """The bells of one process: runs to advance, dispatches to publish."""

    @property
    def runs(self) -> WakeupBell: ...

    @property
    def outbox(self) -> WakeupBell: ...

    def either(self) -> AbstractContextManager[WakeupBell]:
        """A bell rung whenever either of these rings, while the block runs."""
        ...


def wakeup_bells(
    listening: AbstractContextManager[WakeupBells],
) -> AbstractContextManager[WakeupBells]:
    """The store's bells (``projections/wakeups.py``) as the service names them: nothing
    to convert, mypy checks that they are :class:`WakeupBells`."""
    return listening
