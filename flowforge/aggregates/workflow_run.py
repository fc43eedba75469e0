"""The WorkflowRun aggregate: one run of a workflow definition.

Each edge of ``WORKFLOW_RUN_MACHINE`` is one event class (``TRANSITION`` names the edge);
every event carries the row's whole mutable state after it (:data:`MUTABLE_FIELDS`).
A run never goes backwards and never leaves a terminal state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from flowforge import errors
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE, Transition
from flowforge.aggregates.states import WorkflowRunState

MUTABLE_FIELDS: tuple[str, ...] = ("state", "started_at", "finished_at")
STATIC_FIELDS: tuple[str, ...] = (
    "workflow_name",
    "definition",
    "inputs",
    "idempotency_key",
)


class WorkflowRun(Aggregate):
    """A workflow run: its definition, inputs, state and times."""

    class Created(Aggregate.Created):
        workflow_name: str
        definition: dict[str, Any]
        inputs: dict[str, Any]
        idempotency_key: str | None
        actor: str

    class Transitioned(Aggregate.Event):
        TRANSITION: ClassVar[str] = ""

        source: str
        actor: str
        state: str
        started_at: datetime | None
        finished_at: datetime | None

        def apply(self, aggregate: WorkflowRun) -> None:
            aggregate.apply_transitioned(self)

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

    def __init__(
        self,
        workflow_name: str,
        definition: dict[str, Any],
        inputs: dict[str, Any],
        idempotency_key: str | None,
        actor: str,
    ) -> None:
        self.workflow_name = workflow_name
        self.definition = definition
        self.inputs = inputs
        self.idempotency_key = idempotency_key
        self.state = WorkflowRunState.PENDING
        self.started_at: datetime | None = None
        self.finished_at: datetime | None = None

    def apply_transitioned(self, event: WorkflowRun.Transitioned) -> None:
        if event.source != self.state:
            raise errors.CorruptEventLogError(
                f"{describe(event)}: {event.TRANSITION!r} from {event.source!r}, but "
                f"the run is {self.state.value!r}"
            )
        check_replayable(event)
        self.started_at = event.started_at
        self.finished_at = event.finished_at
        self.state = WorkflowRunState(event.state)

    def snapshot(self) -> dict[str, Any]:
        row = {f: getattr(self, f) for f in (*STATIC_FIELDS, *MUTABLE_FIELDS)}
        row["state"] = self.state.value
        row["id"] = self.id
        row["version"] = self.version
        return row

    def transition(self, name: str, *, at: datetime, actor: str) -> bool:
        """Take edge ``name`` if the run is in its source state (pure; ``at`` is the
        database's clock). ``IllegalTransitionError`` for a name not in the table."""
        edge = WORKFLOW_RUN_MACHINE.get(name)
        if self.state != edge.source:
            return False
        self.trigger_event(
            EVENT_FOR_TRANSITION[edge.name],
            timestamp=at,
            source=edge.source.value,
            actor=actor,
            **next_times(edge, self.started_at, self.finished_at, at),
            state=edge.target.value,
        )
        return True


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


EVENT_FOR_TRANSITION: Mapping[str, type[WorkflowRun.Transitioned]] = {
    cls.TRANSITION: cls
    for cls in (
        WorkflowRun.Started,
        WorkflowRun.CancelledBeforeStart,
        WorkflowRun.Succeeded,
        WorkflowRun.Failed,
        WorkflowRun.Cancelled,
    )
}
if set(EVENT_FOR_TRANSITION) != {t.name for t in WORKFLOW_RUN_MACHINE}:
    raise ValueError("WorkflowRun: every edge needs exactly one event class")


def check_replayable(event: WorkflowRun.Transitioned) -> None:
    """``CorruptEventLogError`` naming the event unless its class's edge has exactly
    the event's source and target."""
    problem = WORKFLOW_RUN_MACHINE.replay_problem(event.TRANSITION, event.source, event.state)
    if problem is not None:
        raise errors.CorruptEventLogError(f"{describe(event)}: {problem}")


def describe(event: WorkflowRun.Event) -> str:
    """How an error names an event: class, originator id and version."""
    return f"{type(event).__qualname__} of {event.originator_id} v{event.originator_version}"


def event_from_row(
    event_class: type[WorkflowRun.Transitioned],
    row: Mapping[str, Any],
    *,
    source: str,
    actor: str,
) -> WorkflowRun.Transitioned:
    """The event a conditional write on ``workflow_runs`` just made true."""
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
    run_id: UUID,
    *,
    at: datetime,
    workflow_name: str,
    definition: dict[str, Any],
    inputs: dict[str, Any],
    idempotency_key: str | None,
    actor: str,
) -> WorkflowRun.Created:
    run = WorkflowRun._create(
        WorkflowRun.Created,
        id=run_id,
        timestamp=at,
        workflow_name=workflow_name,
        definition=definition,
        inputs=inputs,
        idempotency_key=idempotency_key,
        actor=actor,
    )
    (event,) = run.collect_events()
    assert isinstance(event, WorkflowRun.Created)
    return event
