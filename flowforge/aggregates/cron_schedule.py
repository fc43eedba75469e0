"""The Schedule aggregate: a workflow started on a cron expression (``flowforge schedule``).

Its fields are declared once, below (:class:`ScheduleFixed`, :class:`ScheduleChanges`);
see :mod:`flowforge.aggregates.base` for what is derived from them. Each edge of
``SCHEDULE_MACHINE`` (pause, resume, delete, delete_paused) is one event class; a fire is
not an edge (an active schedule stays active) but an event of its own, ``Fired``, that
records the nominal fire time and the run it created, like a task's heartbeat records a
lease. Every event carries the row's whole mutable state after it.

The command methods are the pure form of the conditional writes that
``flowforge.projections.writes.cron_schedules`` runs in SQL: each checks its condition
(returning ``False`` when the write would match no row), then triggers its event. The
fire times come from :mod:`flowforge.aggregates.cron`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

from flowforge.aggregates import base, task_run
from flowforge.aggregates.base import Fields, Show
from flowforge.aggregates.machines import SCHEDULE_MACHINE
from flowforge.aggregates.states import ScheduleState

#: Who fires a schedule, in the audit log (the run's creator is ``schedule:<name>``):
#: the scheduler, by the one name every aggregate's events give it.
ACTOR_SCHEDULER = task_run.ACTOR_SCHEDULER
#: The prefix of a fired run's idempotency key: ``schedule:<name>@<fire time, UTC>``.
IDEMPOTENCY_PREFIX = "schedule:"


class ScheduleFixed(Fields):
    """Set when the schedule is added, never changed."""

    name: Annotated[str, Show(brief=True)]
    cron: Annotated[str, Show()]
    timezone: Annotated[str, Show()]
    workflow_name: Annotated[str, Show("workflow")]
    definition: dict[str, Any]
    inputs: Annotated[dict[str, Any], Show()]
    #: How many missed fire times a pass catches up, besides the latest (cron.plan).
    catch_up: Annotated[int, Show()]


class ScheduleChanges(Fields):
    """What changes over a schedule's life (besides ``state``); every event carries it."""

    #: The next fire time this schedule will fire, in UTC; None unless active.
    next_fire_at: Annotated[datetime | None, Show()]
    #: The nominal time of its latest fire, and the run that fire created.
    last_fire_at: Annotated[datetime | None, Show()]
    last_run_id: Annotated[UUID | None, Show()]


DECLARATION = base.declare("Schedule", ScheduleFixed, ScheduleChanges)
MUTABLE_FIELDS: tuple[str, ...] = DECLARATION.mutable
STATIC_FIELDS: tuple[str, ...] = DECLARATION.static


class Schedule(base.MachineAggregate, ScheduleFixed, ScheduleChanges):
    """A cron schedule: what it starts, when, and what it started last."""

    DECLARATION = DECLARATION
    MACHINE = SCHEDULE_MACHINE

    class Created(base.CreatedEvent, ScheduleFixed):
        #: Its first fire time: computed from the clock when it was added.
        next_fire_at: datetime
        actor: str

        def apply(self, aggregate: Any) -> None:
            # After the library's __init__, which sets the fixed fields and the
            # initial ones (no fire time): the first fire time comes from here.
            aggregate.next_fire_at = self.next_fire_at

    class Transitioned(base.TransitionedEvent, ScheduleChanges):
        """A change of the row; subclasses name the edge (``TRANSITION``)."""

    class Paused(Transitioned):
        TRANSITION = "pause"

    class Resumed(Transitioned):
        TRANSITION = "resume"

    class Deleted(Transitioned):
        TRANSITION = "delete"

    class PausedDeleted(Transitioned):
        TRANSITION = "delete_paused"

    class Fired(Transitioned):
        """A fire: not an edge (active to active). ``last_fire_at`` is its nominal fire
        time, ``last_run_id`` the run it created, ``next_fire_at`` the next one."""

        TRANSITION = "fire"

    # --- commands (pure; ``at`` is the database's clock) ----------------------------

    def pause(self, *, at: datetime, actor: str) -> bool:
        edge = SCHEDULE_MACHINE.get("pause")
        if self.state != edge.source:
            return False
        return self._take(edge, at=at, actor=actor, next_fire_at=None)

    def resume(self, next_fire_at: datetime, *, at: datetime, actor: str) -> bool:
        """Active again, firing next at ``next_fire_at`` (the first fire time after the
        clock: the fires missed while paused are not made up)."""
        edge = SCHEDULE_MACHINE.get("resume")
        if self.state != edge.source:
            return False
        return self._take(edge, at=at, actor=actor, next_fire_at=next_fire_at)

    def delete(self, *, at: datetime, actor: str) -> bool:
        """Active or paused to deleted (two edges, one command); final."""
        edge = SCHEDULE_MACHINE.edge(self.state, ScheduleState.DELETED)
        if edge is None:
            return False
        return self._take(edge, at=at, actor=actor, next_fire_at=None)

    def fire(
        self,
        due: datetime,
        fire_at: datetime,
        next_fire_at: datetime,
        run_id: UUID,
        *,
        at: datetime,
    ) -> bool:
        """Record a fire at ``fire_at`` that created ``run_id``, if the schedule is
        active and still next fires at ``due`` (else another scheduler fired it)."""
        if self.state != ScheduleState.ACTIVE or self.next_fire_at != due:
            return False
        self._trigger(
            Schedule.Fired,
            source=self.state,
            at=at,
            actor=ACTOR_SCHEDULER,
            next_fire_at=next_fire_at,
            last_fire_at=fire_at,
            last_run_id=run_id,
        )
        return True


EVENT_FOR_TRANSITION: Mapping[str, type[Schedule.Transitioned]] = base.events_by_transition(
    Schedule, Schedule.Transitioned
)
Schedule.EVENTS = EVENT_FOR_TRANSITION
#: The one recorded change that is not an edge of the table: a fire.
Schedule.NOT_EDGES = {Schedule.Fired.TRANSITION: (ScheduleState.ACTIVE, ScheduleState.ACTIVE)}


def run_actor(name: str) -> str:
    """The actor of the runs schedule ``name`` starts (``schedule:<name>``)."""
    return f"{IDEMPOTENCY_PREFIX}{name}"


def idempotency_key(name: str, fire_at: datetime) -> str:
    """The key of the run a fire creates: the schedule's name and the nominal fire time
    (UTC, to the second), so two fires of one time can never create two runs."""
    utc = fire_at.astimezone(UTC)  # a row's time comes in the session's time zone
    return f"{IDEMPOTENCY_PREFIX}{name}@{utc.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def check_replayable(event: Schedule.Transitioned) -> None:
    """``CorruptEventLogError`` naming the event unless its class's edge (or a fire's
    active -> active) has exactly the event's source and target."""
    base.check_replayable(SCHEDULE_MACHINE, event, Schedule.NOT_EDGES)


def event_from_row(
    event_class: type[Schedule.Transitioned],
    row: Mapping[str, Any],
    *,
    source: str,
    actor: str,
) -> Schedule.Transitioned:
    """The event a conditional write on ``schedules`` just made true."""
    return base.event_from_row(DECLARATION, event_class, row, source=source, actor=actor)


def new_schedule(
    schedule_id: UUID,
    *,
    at: datetime,
    name: str,
    cron: str,
    timezone: str,
    workflow_name: str,
    definition: dict[str, Any],
    inputs: dict[str, Any],
    catch_up: int,
    next_fire_at: datetime,
    actor: str,
) -> Schedule:
    """A new, active schedule; its creation event (version 1) not yet collected."""
    return Schedule._create(
        Schedule.Created,
        id=schedule_id,
        timestamp=at,
        name=name,
        cron=cron,
        timezone=timezone,
        workflow_name=workflow_name,
        definition=definition,
        inputs=inputs,
        catch_up=catch_up,
        next_fire_at=next_fire_at,
        actor=actor,
    )


def created_event(schedule_id: UUID, **fields: Any) -> Schedule.Created:
    """The creation event of a schedule: :func:`new_schedule`'s, collected."""
    (event,) = new_schedule(schedule_id, **fields).collect_events()
    assert isinstance(event, Schedule.Created)
    return event
