"""The TaskRun aggregate: one task of one workflow run, through every attempt.

Its fields are declared once, below (:class:`TaskRunFixed`, :class:`TaskRunChanges`);
the events, ``MUTABLE_FIELDS``, the store's columns and what ``why`` and the CLI show are
derived from them (:mod:`flowforge.aggregates.base`). Each edge of ``TASK_RUN_MACHINE``
is one event class (``TRANSITION`` names the edge), plus ``LeaseRenewed`` for heartbeats.
Every event carries the row's whole mutable state after it, so the current-state row can
be rebuilt from any event alone, and the audit log shows each attempt's token, lease and
times.

The command methods are the pure form of the conditional writes that
``flowforge.projections`` runs in SQL: given the database's clock (``at``), each checks
legality first (raising), then the write's condition (returning ``False`` when it would
match no row), then triggers its event. The stateful test drives the SQL and these
methods side by side and compares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

from flowforge import errors
from flowforge.aggregates import base
from flowforge.aggregates.base import Fields, Initial, Show
from flowforge.aggregates.lost_workers import loses_for_good, worker_lost_error
from flowforge.aggregates.machines import (
    CARRY_OVER_TRANSITION,
    FINISH_TRANSITIONS,
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.states import TaskRunState


class TaskRunFixed(Fields):
    """Set when the task run is created, never changed."""

    workflow_run_id: UUID
    task_key: Annotated[str, Show(brief=True)]
    task_type: Annotated[str, Show()]
    depends_on: Annotated[list[str], Show()]
    max_attempts: Annotated[int, Show()]
    #: The lease a claim takes, from the definition (the task's own or the workflow's),
    #: so a worker claims without reading the definition first. None in events stored
    #: before it was recorded (the rebuild fills it in from the run's definition).
    lease_seconds: Annotated[float | None, Show()]
    #: How long one attempt may run before it is failed (the execution timeout), from
    #: the definition; None: no timeout (and in events stored before timeouts).
    timeout_seconds: Annotated[float | None, Show()]
    #: The definition's ``max_running`` of this task: it starts only while fewer tasks
    #: of its type run (docs/scheduling/limits.md). None: no limit of its own (and in
    #: events stored before limits existed).
    max_running: Annotated[int | None, Show()]
    #: How many of its leases may expire (its worker lost) before the reaper fails it
    #: (``lost_workers``); None in events stored before it: the default.
    max_worker_losses: Annotated[int | None, Show()]
    #: An element of a mapped task (``aggregates.mapping``): its index and its input
    #: element; None for every other task run (and in events stored before mapping).
    map_index: Annotated[int | None, Show(brief=True)]
    map_item: Annotated[Any, Show()]


class TaskRunChanges(Fields):
    """What changes over a task run's life (besides ``state``); every event carries it."""

    fencing_token: Annotated[int, Show(), Initial(0)]
    attempt: Annotated[int, Show(brief=True), Initial(1)]
    lease_owner: Annotated[str | None, Show(brief=True)]
    lease_expires_at: Annotated[datetime | None, Show(brief=True)]
    #: When the attempt in hand times out: its claim's time plus ``timeout_seconds``,
    #: by the database's clock; None when not running or with no timeout. Unlike the
    #: lease, no heartbeat moves it.
    deadline_at: Annotated[datetime | None, Show(brief=True)]
    started_at: Annotated[datetime | None, Show()]
    finished_at: Annotated[datetime | None, Show()]
    retry_due_at: Annotated[datetime | None, Show(brief=True)]
    result: Annotated[Any, Show()]
    error: Annotated[dict[str, str] | None, Show()]
    #: Where a carried-over result was produced (``carry_over``, by a rerun): the run,
    #: the task run and the attempt that ran the handler; through any number of reruns
    #: it names the original, never an intermediate run that carried it over too. None
    #: for a task run that runs its own handler (and in events stored before reruns).
    carried_from_run_id: Annotated[UUID | None, Show()]
    carried_from_task_run_id: Annotated[UUID | None, Show()]
    carried_from_attempt: Annotated[int | None, Show()]
    #: How many of its leases expired, over all its attempts (``lost_workers``).
    worker_losses: Annotated[int, Show(), Initial(0)]


DECLARATION = base.declare("TaskRun", TaskRunFixed, TaskRunChanges)
#: The row columns that change over a task run's life; every event carries them all.
MUTABLE_FIELDS: tuple[str, ...] = DECLARATION.mutable
#: The row columns fixed at creation.
STATIC_FIELDS: tuple[str, ...] = DECLARATION.static

#: Who made a change; recorded on every event.
ACTOR_SCHEDULER = "scheduler"
ACTOR_REAPER = "reaper"
ACTOR_USER = "user"


class TaskRun(base.MachineAggregate, TaskRunFixed, TaskRunChanges):
    """A task run: state, fencing token, attempt, lease, times, result and error."""

    DECLARATION = DECLARATION
    MACHINE = TASK_RUN_MACHINE

    class Created(base.CreatedEvent, TaskRunFixed):
        state: str
        actor: str

    class Transitioned(base.TransitionedEvent, TaskRunChanges):
        """A change of the row; subclasses name the edge (``TRANSITION``)."""

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

    class FailedCancelled(Transitioned):
        TRANSITION = "cancel_failed"

    class RetryingCancelled(Transitioned):
        TRANSITION = "cancel_retrying"

    class ResultCarriedOver(Transitioned):
        """A rerun's task that does not run again: the result of the run it reruns,
        with where it was produced (``carried_from_*``)."""

        TRANSITION = "carry_over"

    class LeaseRenewed(Transitioned):
        """A heartbeat: not an edge (running to running), but a fact for the log."""

        TRANSITION = "renew_lease"

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
        if edge.name == "retry_ready" and not is_due(self.retry_due_at, at):
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
            deadline_at=deadline(self.timeout_seconds, at),
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
            deadline_at=None,
            finished_at=at,
            result=result if edge.name == "succeed" else None,
            error=error if edge.name == "fail" else None,
        )

    def time_out(self, fencing_token: int, *, at: datetime, actor: str) -> bool:
        """The execution timeout: the fail edge for the attempt holding ``fencing_token``,
        only once its deadline has passed by ``at`` (the database's clock)."""
        if self.fencing_token != fencing_token or not is_overdue(self.deadline_at, at):
            return False
        error = timed_out_error(self.timeout_seconds, self.attempt)
        return self.finish("fail", fencing_token, at=at, actor=actor, error=error)

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
        """The reaper's edge: only a running task whose lease expired before ``at``;
        at its bound of lost workers, the fail edge instead (``lost_workers``)."""
        expires = self.lease_expires_at
        if self.state != REAPER_TRANSITION.source or expires is None or not expires < at:
            return False
        losses = self.worker_losses + 1
        cleared: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
        if not loses_for_good(losses, self.max_worker_losses):
            return self._take(
                REAPER_TRANSITION,
                at=at,
                actor=ACTOR_REAPER,
                fencing_token=self.fencing_token + 1,
                deadline_at=None,
                worker_losses=losses,
                **cleared,
            )
        return self._take(
            TASK_RUN_MACHINE.get("fail"),
            at=at,
            actor=ACTOR_REAPER,
            fencing_token=self.fencing_token + 1,
            deadline_at=None,
            worker_losses=losses,
            finished_at=at,
            result=None,
            error=worker_lost_error(losses, self.max_worker_losses),
            **cleared,
        )

    def carry_over(self, result: Any, source: Provenance, *, at: datetime, actor: str) -> bool:
        """A rerun's edge: a task just created pending takes ``result`` as produced by
        ``source``, without running. Only the rerun calls it, in its creation."""
        edge = CARRY_OVER_TRANSITION
        if self.state != edge.source:
            return False
        return self._take(
            edge,
            at=at,
            actor=actor,
            finished_at=at,
            result=result,
            carried_from_run_id=source.run_id,
            carried_from_task_run_id=source.task_run_id,
            carried_from_attempt=source.attempt,
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


def deadline(timeout_seconds: float | None, claimed_at: datetime) -> datetime | None:
    """When an attempt claimed at ``claimed_at`` times out (None: no timeout)."""
    return None if timeout_seconds is None else claimed_at + timedelta(seconds=timeout_seconds)


def is_overdue(deadline_at: datetime | None, at: datetime) -> bool:
    """Whether a running attempt with this deadline has timed out by ``at``."""
    return deadline_at is not None and deadline_at < at


#: The error type a timed-out attempt fails with (``time_out``), as ``why`` reads it.
TIMED_OUT = "TimedOut"


def timed_out_error(timeout_seconds: float | None, attempt: int) -> dict[str, str]:
    """What the audit log records of an attempt failed by its execution timeout."""
    limit = "its timeout" if timeout_seconds is None else f"its timeout of {timeout_seconds:g}s"
    return {
        "type": TIMED_OUT,
        "message": f"attempt {attempt} ran past {limit} and was failed by the scheduler; "
        f"its worker's finish, if it ever comes, is stale and written nowhere",
        "traceback": "",
    }


def is_due(due_at: datetime | None, at: datetime) -> bool:
    """Whether a retry due at ``due_at`` may be made ready at ``at`` (no due time: at once)."""
    return due_at is None or due_at <= at


def transition_rule(name: str) -> Transition:
    """The edge ``transition_task_run`` may take by name, or the error that says why not.

    Legality is decided here, before any I/O: a name not in the table raises
    ``IllegalTransitionError``; an edge that spends a lease raises
    ``LeaseRequiredError`` (use ``finish_task_run``); the reaper's edge raises
    ``ReaperOnlyTransitionError`` (use ``reclaim_task_run``); the rerun's edge raises
    ``RerunOnlyTransitionError`` (use ``rerun_workflow_run``).
    """
    edge = TASK_RUN_MACHINE.get(name)
    if edge.requires_lease:
        raise errors.LeaseRequiredError(name)
    if edge is REAPER_TRANSITION:
        raise errors.ReaperOnlyTransitionError(name)
    if edge is CARRY_OVER_TRANSITION:
        raise errors.RerunOnlyTransitionError(name)
    return edge


def finish_rule(outcome: str) -> Transition:
    """The edge ``finish_task_run`` takes for ``outcome``: succeed, fail, cancel_running."""
    edge = TASK_RUN_MACHINE.get(outcome)
    if edge.name not in FINISH_TRANSITIONS:
        only = f"finish_task_run takes only {sorted(FINISH_TRANSITIONS)}"
        raise errors.IllegalTransitionError("TaskRun", outcome, only)
    return edge


EVENT_FOR_TRANSITION: Mapping[str, type[TaskRun.Transitioned]] = base.events_by_transition(
    TaskRun, TaskRun.Transitioned
)
TaskRun.EVENTS = EVENT_FOR_TRANSITION
#: The one recorded change that is not an edge of the table: a heartbeat.
TaskRun.NOT_EDGES = {TaskRun.LeaseRenewed.TRANSITION: (TaskRunState.RUNNING, TaskRunState.RUNNING)}


def check_replayable(event: TaskRun.Transitioned) -> None:
    """``CorruptEventLogError`` naming the event unless its edge (source and target) is
    the table's edge of its class, or a heartbeat's running -> running."""
    base.check_replayable(TASK_RUN_MACHINE, event, TaskRun.NOT_EDGES)


def event_from_row(
    event_class: type[TaskRun.Transitioned], row: Mapping[str, Any], *, source: str, actor: str
) -> TaskRun.Transitioned:
    """The event a conditional write just made true, built from the row it returned."""
    return base.event_from_row(DECLARATION, event_class, row, source=source, actor=actor)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a task's result was produced: the run, task run and attempt that ran it."""

    run_id: UUID
    task_run_id: UUID
    attempt: int


def new_task_run(
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
    lease_seconds: float | None = None,
    timeout_seconds: float | None = None,
    max_running: int | None = None,
    max_worker_losses: int | None = None,
    **element: Any,
) -> TaskRun:
    """A new task run, its creation event (version 1) not yet collected; an element of
    a mapped task's with ``map_index`` and ``map_item``."""
    return TaskRun._create(
        TaskRun.Created,
        id=task_run_id,
        timestamp=at,
        workflow_run_id=workflow_run_id,
        task_key=task_key,
        task_type=task_type,
        depends_on=list(depends_on),
        max_attempts=max_attempts,
        lease_seconds=lease_seconds,
        timeout_seconds=timeout_seconds,
        max_running=max_running,
        max_worker_losses=max_worker_losses,
        map_index=element.get("map_index"),
        map_item=element.get("map_item"),
        state=state.value,
        actor=actor,
    )


def created_event(task_run_id: UUID, **fields: Any) -> TaskRun.Created:
    """The creation event of a task run (version 1): :func:`new_task_run`'s, collected."""
    task_run = new_task_run(task_run_id, **fields)
    (event,) = task_run.collect_events()
    assert isinstance(event, TaskRun.Created)
    return event
