"""The WorkflowRun aggregate: one run of a workflow definition.

Its fields are declared once, below (:class:`WorkflowRunFixed`,
:class:`WorkflowRunChanges`); see :mod:`flowforge.aggregates.base` for what is derived
from them. Each edge of ``WORKFLOW_RUN_MACHINE`` is one event class (``TRANSITION``
names the edge); every event carries the row's whole mutable state after it
(:data:`MUTABLE_FIELDS`). A run never goes backwards and never leaves a terminal state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from flowforge.aggregates import base
from flowforge.aggregates.base import Fields, Show
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE, Transition


class WorkflowRunFixed(Fields):
    """Set when the run is submitted, never changed."""

    workflow_name: Annotated[str, Show("workflow")]
    definition: dict[str, Any]
    inputs: Annotated[dict[str, Any], Show()]
    idempotency_key: Annotated[str | None, Show()]
    #: The run this one reruns (``rerun_workflow_run``); None for a submitted run, and
    #: in creation events stored before reruns existed (they decode without it).
    rerun_of: Annotated[UUID | None, Show()]
    #: When a delayed run may start, by the database's clock (``start_time``); None for
    #: a run that starts at once, and in creation events stored before delayed starts.
    start_at: Annotated[datetime | None, Show()]
    #: The OpenTelemetry context of the run's creation (``flowforge.tracing``), which
    #: its tasks' dispatches carry, so that the run is one trace; None where nothing
    #: records traces, and in creation events stored before traces existed.
    trace_context: dict[str, str] | None


class WorkflowRunChanges(Fields):
    """What changes over a run's life (besides ``state``); every event carries it."""

    started_at: Annotated[datetime | None, Show()]
    finished_at: Annotated[datetime | None, Show()]


DECLARATION = base.declare("WorkflowRun", WorkflowRunFixed, WorkflowRunChanges)
MUTABLE_FIELDS: tuple[str, ...] = DECLARATION.mutable
STATIC_FIELDS: tuple[str, ...] = DECLARATION.static


class WorkflowRun(base.MachineAggregate, WorkflowRunFixed, WorkflowRunChanges):
    """A workflow run: its definition, inputs, state and times."""

    DECLARATION = DECLARATION
    MACHINE = WORKFLOW_RUN_MACHINE

    class Created(base.CreatedEvent, WorkflowRunFixed):
        actor: str

    class Transitioned(base.TransitionedEvent, WorkflowRunChanges):
        """A change of the row; subclasses name the edge (``TRANSITION``)."""

    class Started(Transitioned):
        TRANSITION = "start"

    class CancelledBeforeStart(Transitioned):
        TRANSITION = "cancel_before_start"

    class Succeeded(Transitioned):
        TRANSITION = "succeed"

    class Failed(Transitioned):
        TRANSITION = "fail"

    class Cancelled(Transitioned):
        TRANSITION = "cancel"

    def transition(self, name: str, *, at: datetime, actor: str) -> bool:
        """Take edge ``name`` if the run is in its source state (pure; ``at`` is the
        database's clock). ``IllegalTransitionError`` for a name not in the table."""
        edge = WORKFLOW_RUN_MACHINE.get(name)
        if self.state != edge.source:
            return False
        times = next_times(edge, self.started_at, self.finished_at, at)
        return self._take(edge, at=at, actor=actor, **times)


def next_times(
    edge: Transition,
    started_at: datetime | None,
    finished_at: datetime | None,
    at: datetime,
) -> dict[str, datetime | None]:
    """A run is started by ``start`` and finished by any edge into a terminal state."""
    return {
        "started_at": at if edge.name == "start" else started_at,
        "finished_at": at if WORKFLOW_RUN_MACHINE.is_terminal(edge.target) else finished_at,
    }


EVENT_FOR_TRANSITION: Mapping[str, type[WorkflowRun.Transitioned]] = base.events_by_transition(
    WorkflowRun, WorkflowRun.Transitioned
)
WorkflowRun.EVENTS = EVENT_FOR_TRANSITION


def check_replayable(event: WorkflowRun.Transitioned) -> None:
    """``CorruptEventLogError`` naming the event unless its class's edge has exactly
    the event's source and target."""
    base.check_replayable(WORKFLOW_RUN_MACHINE, event, WorkflowRun.NOT_EDGES)


def event_from_row(
    event_class: type[WorkflowRun.Transitioned],
    row: Mapping[str, Any],
    *,
    source: str,
    actor: str,
) -> WorkflowRun.Transitioned:
    """The event a conditional write on ``workflow_runs`` just made true."""
    return base.event_from_row(DECLARATION, event_class, row, source=source, actor=actor)


def created_event(
    run_id: UUID,
    *,
    at: datetime,
    workflow_name: str,
    definition: dict[str, Any],
    inputs: dict[str, Any],
    idempotency_key: str | None,
    actor: str,
    rerun_of: UUID | None = None,
    start_at: datetime | None = None,
    trace_context: dict[str, str] | None = None,
) -> WorkflowRun.Created:
    run = WorkflowRun._create(
        WorkflowRun.Created,
        id=run_id,
        timestamp=at,
        workflow_name=workflow_name,
        definition=definition,
        inputs=inputs,
        idempotency_key=idempotency_key,
        rerun_of=rerun_of,
        start_at=start_at,
        trace_context=trace_context,
        actor=actor,
    )
    (event,) = run.collect_events()
    assert isinstance(event, WorkflowRun.Created)
    return event
