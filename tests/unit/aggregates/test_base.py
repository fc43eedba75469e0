"""The one declaration per aggregate, and what is derived from it (pure)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import pytest
from eventsourcing.utils import get_topic

from flowforge.aggregates import base, task_run, workflow_run
from flowforge.aggregates.base import Fields, Initial, Kind, Show
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.projections.tables import COLUMN_CODECS, TaskRunRow, WorkflowRunRow
from tests.unit.aggregates.test_task_run import T0, created

LIBRARY_FIELDS = {"originator_id", "originator_version", "timestamp", "originator_topic"}
AGGREGATES = [(TaskRun, task_run.DECLARATION), (WorkflowRun, workflow_run.DECLARATION)]

#: Stored events are read back by topic: renaming a class would orphan every database.
TOPICS = {
    "flowforge.aggregates.task_run:TaskRun.Created",
    "flowforge.aggregates.task_run:TaskRun.DependenciesSatisfied",
    "flowforge.aggregates.task_run:TaskRun.PendingCancelled",
    "flowforge.aggregates.task_run:TaskRun.Claimed",
    "flowforge.aggregates.task_run:TaskRun.ReadyCancelled",
    "flowforge.aggregates.task_run:TaskRun.Succeeded",
    "flowforge.aggregates.task_run:TaskRun.Failed",
    "flowforge.aggregates.task_run:TaskRun.RunningCancelled",
    "flowforge.aggregates.task_run:TaskRun.LeaseReaped",
    "flowforge.aggregates.task_run:TaskRun.RetryScheduled",
    "flowforge.aggregates.task_run:TaskRun.RetryReady",
    "flowforge.aggregates.task_run:TaskRun.FailedCancelled",
    "flowforge.aggregates.task_run:TaskRun.RetryingCancelled",
    "flowforge.aggregates.task_run:TaskRun.LeaseRenewed",
    "flowforge.aggregates.task_run:TaskRun.ResultCarriedOver",
    "flowforge.aggregates.workflow_run:WorkflowRun.Created",
    "flowforge.aggregates.workflow_run:WorkflowRun.Started",
    "flowforge.aggregates.workflow_run:WorkflowRun.CancelledBeforeStart",
    "flowforge.aggregates.workflow_run:WorkflowRun.Succeeded",
    "flowforge.aggregates.workflow_run:WorkflowRun.Failed",
    "flowforge.aggregates.workflow_run:WorkflowRun.Cancelled",
}


def payload(event_class: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(event_class)} - LIBRARY_FIELDS


def event_classes(aggregate: type[Any]) -> list[type[Any]]:
    return [
        cls
        for cls in vars(aggregate).values()
        if isinstance(cls, type) and issubclass(cls, aggregate.Event) and cls.__name__ != "Event"
    ]


def test_the_stored_event_topics_have_not_changed() -> None:
    topics = {
        get_topic(cls)
        for aggregate, _ in AGGREGATES
        for cls in event_classes(aggregate)
        if cls.__name__ != "Transitioned"
    }

    assert topics == TOPICS


def test_the_mutable_fields_are_state_then_the_declared_changes_in_order() -> None:
    assert task_run.MUTABLE_FIELDS == (
        "state",
        "fencing_token",
        "attempt",
        "lease_owner",
        "lease_expires_at",
        "deadline_at",
        "started_at",
        "finished_at",
        "retry_due_at",
        "result",
        "error",
        "carried_from_run_id",
        "carried_from_task_run_id",
        "carried_from_attempt",
        "worker_losses",
    )
    assert workflow_run.MUTABLE_FIELDS == ("state", "started_at", "finished_at")
    assert task_run.STATIC_FIELDS == (
        "workflow_run_id",
        "task_key",
        "task_type",
        "depends_on",
        "max_attempts",
        "lease_seconds",
        "timeout_seconds",
        "max_running",
        "max_worker_losses",
        "map_index",
        "map_item",
    )
    assert workflow_run.STATIC_FIELDS == (
        "workflow_name",
        "definition",
        "inputs",
        "idempotency_key",
        "rerun_of",
        "start_at",
        "trace_context",
    )


@pytest.mark.parametrize(("aggregate", "declaration"), AGGREGATES)
def test_every_transition_event_carries_exactly_the_declared_mutable_fields(
    aggregate: type[Any], declaration: base.Declaration
) -> None:
    for cls in event_classes(aggregate):
        if issubclass(cls, aggregate.Transitioned):
            assert payload(cls) == {"source", "actor", *declaration.mutable}, cls


def test_the_created_events_carry_the_declared_fixed_fields_and_nothing_more() -> None:
    assert payload(TaskRun.Created) == {*task_run.STATIC_FIELDS, "state", "actor"}
    assert payload(WorkflowRun.Created) == {*workflow_run.STATIC_FIELDS, "actor"}


@pytest.mark.parametrize(
    ("declaration", "row"),
    [(task_run.DECLARATION, TaskRunRow), (workflow_run.DECLARATION, WorkflowRunRow)],
)
def test_every_declared_field_is_a_column_of_the_row_with_the_same_kind(
    declaration: base.Declaration, row: type[Any]
) -> None:
    columns = {f.name for f in dataclasses.fields(row)}
    assert set(declaration.names) <= columns
    for name, kind in declaration.kinds.items():
        stored = COLUMN_CODECS.get(name)
        if kind in (Kind.UUID, Kind.TIMESTAMP, Kind.JSON):
            assert stored is not None, f"{name} is {kind} but the store has no codec for it"
            assert stored.value == kind.value, name
        else:
            assert stored is None, name


class Fixed(Fields):
    owner: UUID
    name: Annotated[str, Show("title", brief=True)]


class Changes(Fields):
    count: Annotated[int, Show(), Initial(7)]
    due_at: datetime | None
    notes: Annotated[dict[str, Any] | None, Show()]


def test_a_declaration_reads_kinds_labels_and_initial_values_from_the_annotations() -> None:
    declaration = base.declare("Thing", Fixed, Changes)

    assert declaration.static == ("owner", "name")
    assert declaration.mutable == ("state", "count", "due_at", "notes")
    assert declaration.kinds == {
        "owner": Kind.UUID,
        "name": Kind.TEXT,
        "state": Kind.TEXT,
        "count": Kind.INTEGER,
        "due_at": Kind.TIMESTAMP,
        "notes": Kind.JSON,
    }
    assert declaration.shown == {
        "name": "title",
        "state": "state",
        "count": "count",
        "notes": "notes",
    }
    assert declaration.brief == {"name": "title", "state": "state"}
    assert declaration.initial() == {"count": 7, "due_at": None, "notes": None}


def test_a_view_has_every_field_its_declarations_declare_and_its_own() -> None:
    @base.view
    class ThingView(Fixed, Changes):
        state: str

    fields = [f.name for f in dataclasses.fields(ThingView)]

    assert set(fields) == {"owner", "name", "count", "due_at", "notes", "state"}


def test_an_aggregate_without_an_event_for_every_edge_is_refused_at_import() -> None:
    with pytest.raises(ValueError, match="every edge needs exactly one event class"):
        base.events_by_transition(WorkflowRun, TaskRun.Transitioned)


@pytest.mark.parametrize(
    ("aggregate", "test_module"),
    [(TaskRun, "test_task_run.py"), (WorkflowRun, "test_workflow_run.py")],
)
def test_every_command_method_of_an_aggregate_has_a_unit_test(
    aggregate: type[Any], test_module: str
) -> None:
    commands = [
        name
        for name, value in vars(aggregate).items()
        if callable(value) and not name.startswith("_") and not isinstance(value, type)
    ]
    source = (Path(__file__).parent / test_module).read_text()

    assert commands
    for name in commands:
        assert f".{name}(" in source, f"{aggregate.__name__}.{name} has no unit test"


def test_an_event_stored_before_a_field_was_declared_replays_it_as_its_initial_value() -> None:
    creation = created()
    task = creation.mutate(None)
    assert isinstance(task, TaskRun)
    assert task.claim("w1", timedelta(seconds=30), at=T0)
    (claimed,) = task.collect_events()
    for old in (creation, claimed):  # as if fencing_token and max_attempts were new
        vars(old).pop("fencing_token", None)
        vars(old).pop("max_attempts", None)

    replayed = claimed.mutate(creation.mutate(None))

    assert isinstance(replayed, TaskRun)
    assert replayed.fencing_token == 0
    assert replayed.max_attempts is None
    assert replayed.lease_owner == "w1"


def test_events_stored_before_reruns_and_delayed_starts_decode_without_their_fields() -> None:
    # A run's creation and a task's events written by a FlowForge without reruns lack
    # rerun_of and carried_from_*: they replay as None (not a rerun, not carried over).
    run_created = workflow_run.created_event(
        UUID(int=1),
        at=T0,
        workflow_name="w",
        definition={},
        inputs={},
        idempotency_key=None,
        actor="user",
    )
    vars(run_created).pop("rerun_of")
    vars(run_created).pop("start_at")
    run = run_created.mutate(None)
    assert isinstance(run, WorkflowRun)
    assert (run.rerun_of, run.start_at) == (None, None)
    assert run.snapshot()["rerun_of"] is None
    assert run.snapshot()["start_at"] is None

    creation = created()
    task = creation.mutate(None)
    assert isinstance(task, TaskRun)
    assert task.claim("w1", timedelta(seconds=30), at=T0)
    (claimed,) = task.collect_events()
    for name in ("carried_from_run_id", "carried_from_task_run_id", "carried_from_attempt"):
        vars(claimed).pop(name)
    replayed = claimed.mutate(creation.mutate(None))
    assert isinstance(replayed, TaskRun)
    assert replayed.carried_from_run_id is None
    assert replayed.carried_from_attempt is None
    assert replayed.lease_owner == "w1"
