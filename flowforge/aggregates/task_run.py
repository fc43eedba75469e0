"""The TaskRun aggregate: one task of one workflow run, through every attempt.

Each edge of ``TASK_RUN_MACHINE`` is one event class (``TRANSITION`` names the edge),
plus ``LeaseRenewed`` for heartbeats. Every event carries the row's whole mutable state
after it (:data:`MUTABLE_FIELDS`), so the current-state row can be rebuilt from any
event alone, and the audit log shows each attempt's token, lease and times.

The command methods are the pure form of the conditional writes that
``flowforge.projections`` runs in SQL: given the database's clock (``at``), each checks
legality first (raising), then the write's condition (returning ``False`` when it would
match no row), then triggers its event. The stateful test drives the SQL and these
methods side by side and compares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from flowforge import errors
from flowforge.aggregates.machines import (
    FINISH_TRANSITIONS,
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.states import TaskRunState

#: The row columns that change over a task run's life; every event carries them all.
MUTABLE_FIELDS: tuple[str, ...] = (
    "state",
    "fencing_token",
    "attempt",
    "lease_owner",
    "lease_expires_at",
    "started_at",
    "finished_at",
    "retry_due_at",
    "result",
    "error",
)
#: The row columns fixed at creation.
STATIC_FIELDS: tuple[str, ...] = (
    "workflow_run_id",
    "task_key",
    "task_type",
    "depends_on",
    "max_attempts",
)

#: Who made a change; recorded on every event.
ACTOR_SCHEDULER = "scheduler"
ACTOR_REAPER = "reaper"
ACTOR_USER = "user"


class TaskRun(Aggregate):
    """A task run: state, fencing token, attempt, lease, times, result and error."""

    class Created(Aggregate.Created):
        workflow_run_id: UUID
        task_key: str
        task_type: str
        depends_on: list[str]
        max_attempts: int
        state: str
        actor: str

    class Transitioned(Aggregate.Event):
        """A change of the row; subclasses name the edge (``TRANSITION``)."""

        TRANSITION: ClassVar[str] = ""

        source: str
        actor: str
        state: str
        fencing_token: int
        attempt: int
        lease_owner: str | None
        lease_expires_at: datetime | None
        started_at: datetime | None
        finished_at: datetime | None
        retry_due_at: datetime | None
        result: Any
        error: dict[str, str] | None

        def apply(self, aggregate: TaskRun) -> None:
            aggregate.apply_transitioned(self)

    class DependenciesSatisfied(Transitioned):
        TRANSITION = "dependencies_satisfied"

    class PendingCancelled(Transitioned):
        TRANSITION = "cancel_pending"

    class Claimed(Transitioned):
        TRANSITION = "claim"

    class ReadyCancelled(Transitioned):
        TRANSITION = "cancel_ready"

    class Succeeded(Transitioned):
        TRANSITION = "succeed"

    class Failed(Transitioned):
        TRANSITION = "fail"

    class RunningCancelled(Transitioned):
        TRANSITION = "cancel_running"

    class LeaseReaped(Transitioned):
        TRANSITION = "reap_lease"

    class RetryScheduled(Transitioned):
        TRANSITION = "schedule_retry"

    class RetryReady(Transitioned):
        TRANSITION = "retry_ready"

    class LeaseRenewed(Transitioned):
        """A heartbeat: not an edge (running to running), but a fact for the log."""

        TRANSITION = "renew_lease"

    def __init__(
        self,
        workflow_run_id: UUID,
        task_key: str,
        task_type: str,
        depends_on: list[str],
        max_attempts: int,
        state: str,
        actor: str,
    ) -> None:
        self.workflow_run_id = workflow_run_id
        self.task_key = task_key
        self.task_type = task_type
        self.depends_on = list(depends_on)
        self.max_attempts = max_attempts
        self.state = TaskRunState(state)
        self.fencing_token = 0
        self.attempt = 1
        self.lease_owner: str | None = None
        self.lease_expires_at: datetime | None = None
        self.started_at: datetime | None = None
        self.finished_at: datetime | None = None
        self.retry_due_at: datetime | None = None
        self.result: Any = None
        self.error: dict[str, str] | None = None

    # --- reconstitution ------------------------------------------------------------

    def apply_transitioned(self, event: TaskRun.Transitioned) -> None:
        """Set the row state an event carries, after checking it follows from ours:
        its edge is the table's (source and target), and its source is our state."""
        if event.source != self.state:
            raise errors.CorruptEventLogError(
                f"{describe(event)}: {event.TRANSITION!r} from {event.source!r}, but "
                f"the task run is {self.state.value!r}"
            )
        check_replayable(event)
        for field in MUTABLE_FIELDS:
            setattr(self, field, getattr(event, field))
        self.state = TaskRunState(event.state)

    def snapshot(self) -> dict[str, Any]:
        """The current-state row this aggregate projects to (without timestamps)."""
        row = {f: getattr(self, f) for f in (*STATIC_FIELDS, *MUTABLE_FIELDS)}
        row["state"] = self.state.value
        row["id"] = self.id
        row["version"] = self.version
        return row

    # --- commands (pure; ``at`` is the database's clock) ----------------------------

    def transition(self, name: str, *, at: datetime, actor: str) -> bool:
        """Take an edge that needs no lease and no arguments (see ``transition_rule``)."""
        edge = transition_rule(name)
        if edge.name == "claim":
            raise errors.IllegalTransitionError(
                "TaskRun", name, "claiming needs a worker and a lease: use claim()"
            )
        if edge.name == "schedule_retry":
            return self.schedule_retry(delay=timedelta(0), at=at, actor=actor)
        if self.state != edge.source:
            return False
        if edge.name == "retry_ready" and not _is_due(self.retry_due_at, at):
            return False
        terminal = TASK_RUN_MACHINE.is_terminal(edge.target)
        return self._take(
            edge,
            at=at,
            actor=actor,
            finished_at=at if terminal else self.finished_at,
            retry_due_at=None,
        )

    def claim(self, worker_id: str, lease: timedelta, *, at: datetime) -> bool:
        edge = TASK_RUN_MACHINE.get("claim")
        if self.state != edge.source:
            return False
        return self._take(
            edge,
            at=at,
            actor=worker_id,
            fencing_token=self.fencing_token + 1,
            lease_owner=worker_id,
            lease_expires_at=at + lease,
            started_at=self.started_at or at,
        )

    def finish(
        self,
        outcome: str,
        fencing_token: int,
        *,
        at: datetime,
        actor: str,
        result: Any = None,
        error: dict[str, str] | None = None,
    ) -> bool:
        edge = finish_rule(outcome)
        if self.state != edge.source or self.fencing_token != fencing_token:
            return False
        return self._take(
            edge,
            at=at,
            actor=actor,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=at,
            result=result if edge.name == "succeed" else None,
            error=error if edge.name == "fail" else None,
        )

    def renew_lease(
        self, fencing_token: int, lease: timedelta, *, at: datetime, actor: str
    ) -> bool:
        if self.state != TaskRunState.RUNNING or self.fencing_token != fencing_token:
            return False
        self._trigger(
            TaskRun.LeaseRenewed,
            source=self.state,
            at=at,
            actor=actor,
            lease_expires_at=at + lease,
        )
        return True

    def reclaim(self, *, at: datetime) -> bool:
        """The reaper's edge: only a running task whose lease expired before ``at``."""
        edge = REAPER_TRANSITION
        expires = self.lease_expires_at
        if self.state != edge.source or expires is None or not expires < at:
            return False
        return self._take(
            edge,
            at=at,
            actor=ACTOR_REAPER,
            fencing_token=self.fencing_token + 1,
            lease_owner=None,
            lease_expires_at=None,
        )

    def schedule_retry(self, *, delay: timedelta, at: datetime, actor: str) -> bool:
        edge = TASK_RUN_MACHINE.get("schedule_retry")
        if self.state != edge.source or self.attempt >= self.max_attempts:
            return False
        return self._take(
            edge,
            at=at,
            actor=actor,
            attempt=self.attempt + 1,
            finished_at=None,
            lease_owner=None,
            lease_expires_at=None,
            retry_due_at=at + delay,
        )

    # --- internals --------------------------------------------------------------------

    def _take(self, edge: Transition, *, at: datetime, actor: str, **changes: Any) -> bool:
        self._trigger(
            EVENT_FOR_TRANSITION[edge.name],
            source=edge.source,
            at=at,
            actor=actor,
            state=edge.target,
            **changes,
        )
        return True

    def _trigger(
        self,
        event_class: type[TaskRun.Transitioned],
        *,
        source: str,
        at: datetime,
        actor: str,
        **changes: Any,
    ) -> None:
        values = {f: getattr(self, f) for f in MUTABLE_FIELDS}
        values.update(changes)
        values["state"] = str(values["state"])
        self.trigger_event(event_class, timestamp=at, source=str(source), actor=actor, **values)


def _is_due(due_at: datetime | None, at: datetime) -> bool:
    return due_at is None or due_at <= at


def transition_rule(name: str) -> Transition:
    """The edge ``transition_task_run`` may take by name, or the error that says why not.

    Legality is decided here, before any I/O: a name not in the table raises
    ``IllegalTransitionError``; an edge that spends a lease raises
    ``LeaseRequiredError`` (use ``finish_task_run``); the reaper's edge raises
    ``ReaperOnlyTransitionError`` (use ``reclaim_task_run``).
    """
    edge = TASK_RUN_MACHINE.get(name)
    if edge.requires_lease:
        raise errors.LeaseRequiredError(name)
    if edge is REAPER_TRANSITION:
        raise errors.ReaperOnlyTransitionError(name)
    return edge


def finish_rule(outcome: str) -> Transition:
    """The edge ``finish_task_run`` takes for ``outcome``: succeed, fail, cancel_running."""
    edge = TASK_RUN_MACHINE.get(outcome)
    if edge.name not in FINISH_TRANSITIONS:
        raise errors.IllegalTransitionError(
            "TaskRun",
            outcome,
            f"finish_task_run takes only {sorted(FINISH_TRANSITIONS)}",
        )
    return edge


EVENT_FOR_TRANSITION: Mapping[str, type[TaskRun.Transitioned]] = {
    cls.TRANSITION: cls
    for cls in (
        TaskRun.DependenciesSatisfied,
        TaskRun.PendingCancelled,
        TaskRun.Claimed,
        TaskRun.ReadyCancelled,
        TaskRun.Succeeded,
        TaskRun.Failed,
        TaskRun.RunningCancelled,
        TaskRun.LeaseReaped,
        TaskRun.RetryScheduled,
        TaskRun.RetryReady,
    )
}
if set(EVENT_FOR_TRANSITION) != {t.name for t in TASK_RUN_MACHINE}:
    raise ValueError("TaskRun: every edge needs exactly one event class")


#: The one recorded change that is not an edge of the table: a heartbeat.
_NOT_AN_EDGE = {TaskRun.LeaseRenewed.TRANSITION: (TaskRunState.RUNNING, TaskRunState.RUNNING)}


def check_replayable(event: TaskRun.Transitioned) -> None:
    """``CorruptEventLogError`` naming the event unless it records a change the table
    allows: the edge its class names, with that edge's source AND target."""
    heartbeat = _NOT_AN_EDGE.get(event.TRANSITION)
    if heartbeat is None:
        problem = TASK_RUN_MACHINE.replay_problem(event.TRANSITION, event.source, event.state)
    elif (event.source, event.state) != heartbeat:
        problem = f"a heartbeat records {event.source!r} -> {event.state!r}, not running"
    else:
        problem = None
    if problem is not None:
        raise errors.CorruptEventLogError(f"{describe(event)}: {problem}")


def describe(event: TaskRun.Event) -> str:
    """How an error names an event: class, originator id and version."""
    return f"{type(event).__qualname__} of {event.originator_id} v{event.originator_version}"


def event_from_row(
    event_class: type[TaskRun.Transitioned],
    row: Mapping[str, Any],
    *,
    source: str,
    actor: str,
) -> TaskRun.Transitioned:
    """The event a conditional write just made true, built from the row it returned.

    The row is the database's answer (its clock, its token), so the event records
    exactly what the row now says; ``row["version"]`` is the event's version.
    """
    values: dict[str, Any] = {f: row[f] for f in MUTABLE_FIELDS}
    values.update(
        originator_id=row["id"],
        originator_version=row["version"],
        timestamp=row["updated_at"],
        source=source,
        actor=actor,
    )
    return event_class(**values)


def created_event(
    task_run_id: UUID,
    *,
    at: datetime,
    workflow_run_id: UUID,
    task_key: str,
    task_type: str,
    depends_on: list[str],
    max_attempts: int,
    state: TaskRunState,
    actor: str,
) -> TaskRun.Created:
    """The creation event of a task run (version 1)."""
    task_run = TaskRun._create(
        TaskRun.Created,
        id=task_run_id,
        timestamp=at,
        workflow_run_id=workflow_run_id,
        task_key=task_key,
        task_type=task_type,
        depends_on=list(depends_on),
        max_attempts=max_attempts,
        state=state.value,
        actor=actor,
    )
    (event,) = task_run.collect_events()
    assert isinstance(event, TaskRun.Created)
    return event
