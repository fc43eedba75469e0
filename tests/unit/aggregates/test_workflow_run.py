"""The WorkflowRun aggregate's pure command, its events, and its reconstitution."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge import errors
from flowforge.aggregates import workflow_run
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import WorkflowRunState
from flowforge.aggregates.workflow_run import WorkflowRun

W = WorkflowRunState
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
RUN_ID = UUID("00000000-0000-4000-8000-0000000000aa")
NAMES = sorted(t.name for t in WORKFLOW_RUN_MACHINE)


def created() -> WorkflowRun.Created:
    return workflow_run.created_event(
        RUN_ID,
        at=T0,
        workflow_name="etl",
        definition={"name": "etl", "tasks": [{"key": "a", "type": "a"}]},
        inputs={"day": "2030-01-01"},
        idempotency_key="etl-2030-01-01",
        actor="user",
    )


def new_run() -> WorkflowRun:
    run = created().mutate(None)
    assert isinstance(run, WorkflowRun)
    return run


def in_state(state: WorkflowRunState) -> WorkflowRun:
    """A run brought to ``state`` by commands, its events already collected."""
    run = new_run()
    if state is W.CANCELLED:
        assert run.transition("cancel_before_start", at=T0, actor="user")
    elif state is not W.PENDING:
        assert run.transition("start", at=T0, actor="scheduler")
        finish = {W.SUCCEEDED: "succeed", W.FAILED: "fail"}.get(state)
        if finish:
            assert run.transition(finish, at=T0, actor="scheduler")
    run.collect_events()
    assert run.state is state
    return run


def replay(creation: WorkflowRun.Created, events: Sequence[Any]) -> WorkflowRun:
    aggregate = creation.mutate(None)
    for event in events:
        aggregate = event.mutate(aggregate)
    assert isinstance(aggregate, WorkflowRun)
    return aggregate


def test_a_new_run_is_pending_with_its_definition_inputs_and_key() -> None:
    run = new_run()
    assert (run.state, run.version, run.started_at, run.finished_at) == (W.PENDING, 1, None, None)
    assert run.workflow_name == "etl"
    assert run.inputs == {"day": "2030-01-01"}
    assert run.idempotency_key == "etl-2030-01-01"
    assert run.snapshot()["state"] == "pending"


# --- transitions ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_edge_from_its_source_state_records_its_own_event(name: str) -> None:
    edge = WORKFLOW_RUN_MACHINE.get(name)
    run = in_state(W(edge.source))
    at = T0 + timedelta(minutes=1)
    assert run.transition(name, at=at, actor="scheduler")
    (event,) = run.collect_events()
    assert type(event) is workflow_run.EVENT_FOR_TRANSITION[name]
    assert (event.source, event.state, event.actor) == (edge.source, edge.target, "scheduler")
    assert event.timestamp == at
    assert run.state is edge.target


@pytest.mark.parametrize("name", NAMES)
def test_each_edge_from_any_other_state_loses_and_records_nothing(name: str) -> None:
    source = WORKFLOW_RUN_MACHINE.get(name).source
    for state in WorkflowRunState:
        if state is source:
            continue
        run = in_state(state)
        before = run.snapshot()
        assert run.transition(name, at=T0, actor="scheduler") is False, state
        assert run.collect_events() == []
        assert run.snapshot() == before


@pytest.mark.parametrize("name", ["claim", "cancel_running", "reap_lease", "finish", ""])
def test_a_name_not_in_the_table_raises_before_any_event(name: str) -> None:
    run = in_state(W.RUNNING)
    before = run.snapshot()
    with pytest.raises(errors.IllegalTransitionError) as caught:
        run.transition(name, at=T0, actor="user")
    assert caught.value.machine == "WorkflowRun"
    assert run.collect_events() == []
    assert run.snapshot() == before


def test_start_sets_started_at_and_a_terminal_edge_sets_finished_at() -> None:
    run = new_run()
    assert run.transition("start", at=T0 + timedelta(seconds=1), actor="scheduler")
    assert (run.started_at, run.finished_at) == (T0 + timedelta(seconds=1), None)
    assert run.transition("succeed", at=T0 + timedelta(seconds=9), actor="scheduler")
    assert run.started_at == T0 + timedelta(seconds=1)
    assert run.finished_at == T0 + timedelta(seconds=9)


def test_a_run_cancelled_before_start_finishes_without_ever_starting() -> None:
    run = new_run()
    assert run.transition("cancel_before_start", at=T0 + timedelta(seconds=2), actor="user")
    assert (run.state, run.started_at, run.finished_at) == (
        W.CANCELLED,
        None,
        T0 + timedelta(seconds=2),
    )


@pytest.mark.parametrize("state", sorted(WORKFLOW_RUN_MACHINE.terminal))
def test_a_terminal_run_never_changes_again(state: WorkflowRunState) -> None:
    run = in_state(state)
    before = run.snapshot()
    for name in NAMES:
        assert run.transition(name, at=T0 + timedelta(days=1), actor="user") is False
    assert run.collect_events() == []
    assert run.snapshot() == before


def test_next_times_starts_on_start_and_finishes_on_any_terminal_edge() -> None:
    started, at = T0, T0 + timedelta(seconds=5)
    for edge in WORKFLOW_RUN_MACHINE:
        times = workflow_run.next_times(edge, started, None, at)
        assert times["started_at"] == (at if edge.name == "start" else started)
        terminal = WORKFLOW_RUN_MACHINE.is_terminal(edge.target)
        assert times["finished_at"] == (at if terminal else None)


# --- events and edges ---------------------------------------------------------------------


def test_every_event_class_maps_to_exactly_one_edge() -> None:
    classes = [
        cls
        for cls in vars(WorkflowRun).values()
        if isinstance(cls, type)
        and issubclass(cls, WorkflowRun.Transitioned)
        and cls is not WorkflowRun.Transitioned
    ]
    assert len(classes) == len(WORKFLOW_RUN_MACHINE)
    assert set(workflow_run.EVENT_FOR_TRANSITION) == set(NAMES)
    for cls in classes:
        assert workflow_run.EVENT_FOR_TRANSITION[cls.TRANSITION] is cls


def test_the_event_built_from_a_returned_row_equals_the_pure_commands_event() -> None:
    run = new_run()
    assert run.transition("start", at=T0, actor="scheduler")
    (pure,) = run.collect_events()
    row = {**run.snapshot(), "updated_at": T0}
    built = workflow_run.event_from_row(
        WorkflowRun.Started, row, source="pending", actor="scheduler"
    )
    assert built == pure


# --- reconstitution -------------------------------------------------------------------


def test_replaying_a_runs_events_rebuilds_an_equal_run() -> None:
    creation = created()
    run = creation.mutate(None)
    assert isinstance(run, WorkflowRun)
    assert run.transition("start", at=T0 + timedelta(seconds=1), actor="scheduler")
    assert run.transition("fail", at=T0 + timedelta(seconds=2), actor="scheduler")
    events = run.collect_events()
    rebuilt = replay(creation, events)
    assert rebuilt.snapshot() == run.snapshot()
    assert rebuilt == run
    assert rebuilt.version == 3


def test_replaying_an_event_whose_source_is_not_the_current_state_is_corrupt() -> None:
    creation = created()
    run = in_state(W.RUNNING)
    assert run.transition("succeed", at=T0, actor="scheduler")
    (succeeded,) = run.collect_events()
    assert isinstance(succeeded, WorkflowRun.Succeeded)
    # Version 2 of a pending run, but the event says it left running.
    forged = dataclasses.replace(succeeded, originator_version=2)
    with pytest.raises(errors.CorruptEventLogError, match="'succeed' from 'running'") as caught:
        replay(creation, [forged])
    assert "'pending'" in str(caught.value)


def test_replaying_a_forged_start_that_lands_in_succeeded_is_corrupt_and_names_the_event() -> None:
    creation = created()
    run = new_run()
    assert run.transition("start", at=T0, actor="scheduler")
    started: Any = run.collect_events()[0]  # a dataclass whose fields mypy cannot see
    forged = dataclasses.replace(started, state="succeeded")
    with pytest.raises(errors.CorruptEventLogError) as caught:
        replay(creation, [forged])
    message = str(caught.value)
    assert "WorkflowRun.Started" in message
    assert "v2" in message
    assert "'start' is 'pending' -> 'running'" in message


# --- any sequence of commands -------------------------------------------------------------


@settings(max_examples=100)
@given(st.lists(st.sampled_from([*NAMES, "no_such_edge"]), max_size=12))
def test_any_sequence_of_transitions_moves_only_along_edges_and_replays_equal(
    names: list[str],
) -> None:
    creation = created()
    run = creation.mutate(None)
    assert isinstance(run, WorkflowRun)
    log: list[Any] = []
    at = T0
    for name in names:
        at += timedelta(seconds=1)
        before = run.snapshot()
        was_terminal = WORKFLOW_RUN_MACHINE.is_terminal(run.state)
        if name not in WORKFLOW_RUN_MACHINE:
            with pytest.raises(errors.IllegalTransitionError):
                run.transition(name, at=at, actor="user")
            taken = False
        else:
            taken = run.transition(name, at=at, actor="user")
        events = run.collect_events()
        log.extend(events)
        assert len(events) == int(taken)
        if taken:
            edge = WORKFLOW_RUN_MACHINE.get(name)
            assert (before["state"], run.state) == (edge.source, edge.target)
        else:
            assert run.snapshot() == before
        assert not (was_terminal and taken)
        # started_at is set by start only; finished_at exactly when terminal.
        assert (run.finished_at is not None) == WORKFLOW_RUN_MACHINE.is_terminal(run.state)
        if run.state is W.RUNNING:
            assert run.started_at is not None
    assert replay(creation, log).snapshot() == run.snapshot()
