"""The two state machines are the spec's tables, edge for edge, and a bad table cannot be
built: every validation rule has a deliberately bad table that breaks it."""

from __future__ import annotations

from enum import StrEnum

import pytest

from flowforge import errors
from flowforge.aggregates.machines import (
    FINISH_TRANSITIONS,
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    WORKFLOW_RUN_MACHINE,
    StateMachine,
    Transition,
)
from flowforge.aggregates.states import TaskRunState, WorkflowRunState

# A literal copy of the spec's tables (docs/execution-model.md, "The two state machines"):
# (transition, source, target, requires lease).
SPEC_WORKFLOW_RUN_TABLE = {
    ("start", "pending", "running", False),
    ("cancel_before_start", "pending", "cancelled", False),
    ("succeed", "running", "succeeded", False),
    ("fail", "running", "failed", False),
    ("cancel", "running", "cancelled", False),
}
SPEC_TASK_RUN_TABLE = {
    ("dependencies_satisfied", "pending", "ready", False),
    ("cancel_pending", "pending", "cancelled", False),
    ("claim", "ready", "running", False),
    ("cancel_ready", "ready", "cancelled", False),
    ("succeed", "running", "succeeded", True),
    ("fail", "running", "failed", True),
    ("cancel_running", "running", "cancelled", True),
    ("reap_lease", "running", "ready", False),
    ("schedule_retry", "failed", "retrying", False),
    ("retry_ready", "retrying", "ready", False),
}
#: FlowForge's two further cancels (docs/execution-model.md, "A run ends whole"), and
#: a rerun's carry-over ("Rerunning a run").
EXTENDED_TASK_RUN_TABLE = {
    *SPEC_TASK_RUN_TABLE,
    ("cancel_failed", "failed", "cancelled", False),
    ("cancel_retrying", "retrying", "cancelled", False),
    ("carry_over", "pending", "succeeded", False),
}

MACHINES = [
    pytest.param(
        WORKFLOW_RUN_MACHINE, WorkflowRunState, SPEC_WORKFLOW_RUN_TABLE, id="WorkflowRun"
    ),
    pytest.param(TASK_RUN_MACHINE, TaskRunState, EXTENDED_TASK_RUN_TABLE, id="TaskRun"),
]


def rows(machine: StateMachine) -> list[tuple[str, str, str, bool]]:
    return [(t.name, t.source.value, t.target.value, t.requires_lease) for t in machine]


# --- the tables are the spec's -------------------------------------------------------------


@pytest.mark.parametrize(("machine", "states", "spec_table"), MACHINES)
def test_the_table_is_exactly_the_specs_table(
    machine: StateMachine,
    states: type[StrEnum],
    spec_table: set[tuple[str, str, str, bool]],
) -> None:
    assert machine.states is states
    assert len(machine) == len(spec_table)
    assert sorted(rows(machine)) == sorted(spec_table)


def test_the_workflow_run_machine_has_five_edges_and_the_task_run_machine_thirteen() -> None:
    assert len(WORKFLOW_RUN_MACHINE) == 5
    # The spec's ten, FlowForge's two cancels and the rerun's carry-over.
    assert len(TASK_RUN_MACHINE) == 13


@pytest.mark.parametrize(("machine", "states", "spec_table"), MACHINES)
def test_every_edge_uses_members_of_its_machines_own_enum(
    machine: StateMachine,
    states: type[StrEnum],
    spec_table: set[tuple[str, str, str, bool]],
) -> None:
    for transition in machine:
        assert isinstance(transition.source, states), transition
        assert isinstance(transition.target, states), transition


def test_a_workflow_run_starts_pending_and_ends_succeeded_failed_or_cancelled() -> None:
    assert WORKFLOW_RUN_MACHINE.initial is WorkflowRunState.PENDING
    assert WORKFLOW_RUN_MACHINE.terminal == {
        WorkflowRunState.SUCCEEDED,
        WorkflowRunState.FAILED,
        WorkflowRunState.CANCELLED,
    }


def test_a_task_run_starts_pending_and_ends_only_succeeded_or_cancelled() -> None:
    assert TASK_RUN_MACHINE.initial is TaskRunState.PENDING
    assert TASK_RUN_MACHINE.terminal == {TaskRunState.SUCCEEDED, TaskRunState.CANCELLED}


def test_failed_is_not_terminal_for_a_task_run_and_leads_to_a_retry() -> None:
    assert not TASK_RUN_MACHINE.is_terminal(TaskRunState.FAILED)
    retry = TASK_RUN_MACHINE.edge(TaskRunState.FAILED, TaskRunState.RETRYING)
    assert retry is not None
    assert retry.name == "schedule_retry"


def test_failed_is_terminal_for_a_workflow_run() -> None:
    assert WORKFLOW_RUN_MACHINE.is_terminal(WorkflowRunState.FAILED)


def test_a_workflow_run_never_goes_back_to_pending() -> None:
    assert all(t.target is not WorkflowRunState.PENDING for t in WORKFLOW_RUN_MACHINE)


# --- looking edges up -------------------------------------------------------------------


@pytest.mark.parametrize(("machine", "states", "spec_table"), MACHINES)
def test_get_returns_the_edge_of_each_name(
    machine: StateMachine,
    states: type[StrEnum],
    spec_table: set[tuple[str, str, str, bool]],
) -> None:
    for name, source, target, requires_lease in spec_table:
        edge = machine.get(name)
        assert (edge.name, edge.source, edge.target) == (name, source, target)
        assert edge.requires_lease is requires_lease
        assert name in machine


@pytest.mark.parametrize(
    ("machine", "name"),
    [
        (WORKFLOW_RUN_MACHINE, "claim"),  # a TaskRun edge, not a WorkflowRun one
        (WORKFLOW_RUN_MACHINE, "cancel_running"),
        (TASK_RUN_MACHINE, "cancel"),  # a WorkflowRun edge, not a TaskRun one
        (TASK_RUN_MACHINE, "renew_lease"),  # a heartbeat is an event, not an edge
        (TASK_RUN_MACHINE, "Claim"),
        (TASK_RUN_MACHINE, ""),
    ],
)
def test_get_raises_illegal_transition_for_an_unknown_name(
    machine: StateMachine, name: str
) -> None:
    assert name not in machine
    with pytest.raises(errors.IllegalTransitionError) as caught:
        machine.get(name)
    assert caught.value.machine == machine.name
    assert caught.value.transition == name
    assert repr(name) in str(caught.value)


def test_edge_finds_the_transition_between_two_states_or_none() -> None:
    claim = TASK_RUN_MACHINE.edge(TaskRunState.READY, TaskRunState.RUNNING)
    assert claim is TASK_RUN_MACHINE.get("claim")
    assert TASK_RUN_MACHINE.edge(TaskRunState.RUNNING, TaskRunState.PENDING) is None
    assert TASK_RUN_MACHINE.edge(TaskRunState.FAILED, TaskRunState.READY) is None


# --- the three design points ------------------------------------------------------------


def test_only_succeed_fail_and_cancel_running_require_a_lease() -> None:
    assert {"succeed", "fail", "cancel_running"} == FINISH_TRANSITIONS
    assert {t.name for t in TASK_RUN_MACHINE if t.requires_lease} == FINISH_TRANSITIONS
    assert all(t.source is TaskRunState.RUNNING for t in TASK_RUN_MACHINE if t.requires_lease)


def test_claim_does_not_require_a_lease_because_it_is_what_acquires_one() -> None:
    assert TASK_RUN_MACHINE.get("claim").requires_lease is False
    assert "claim" not in FINISH_TRANSITIONS


def test_no_workflow_run_edge_requires_a_lease() -> None:
    assert not any(t.requires_lease for t in WORKFLOW_RUN_MACHINE)


def test_the_reaper_transition_is_reap_lease_from_running_back_to_ready() -> None:
    assert REAPER_TRANSITION is TASK_RUN_MACHINE.get("reap_lease")
    assert REAPER_TRANSITION.source is TaskRunState.RUNNING
    assert REAPER_TRANSITION.target is TaskRunState.READY
    assert REAPER_TRANSITION.requires_lease is False
    assert REAPER_TRANSITION.name not in FINISH_TRANSITIONS


def test_cancellation_is_one_task_run_edge_per_unfinished_state() -> None:
    cancels = {t.name: t.source for t in TASK_RUN_MACHINE if t.target is TaskRunState.CANCELLED}
    assert cancels == {
        "cancel_pending": TaskRunState.PENDING,
        "cancel_ready": TaskRunState.READY,
        "cancel_running": TaskRunState.RUNNING,
        "cancel_failed": TaskRunState.FAILED,
        "cancel_retrying": TaskRunState.RETRYING,
    }
    # Every state a task can still leave has a cancel: a run that ends can end it.
    unfinished = set(TaskRunState) - TASK_RUN_MACHINE.terminal
    assert set(cancels.values()) == unfinished


# --- validation: every rule has a bad table ---------------------------------------------


class Door(StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    GONE = "gone"


class Window(StrEnum):
    """Another enum: ``OPEN`` shares a value with ``Door.OPEN``, ``SHUT`` shares none."""

    OPEN = "open"
    SHUT = "shut"


CLOSE = Transition("close", Door.OPEN, Door.CLOSED)
REOPEN = Transition("reopen", Door.CLOSED, Door.OPEN)
DEMOLISH = Transition("demolish", Door.CLOSED, Door.GONE)
GOOD_TABLE = (CLOSE, REOPEN, DEMOLISH)


def door_machine(
    transitions: tuple[Transition, ...] = GOOD_TABLE,
    *,
    initial: StrEnum = Door.OPEN,
    terminal: tuple[StrEnum, ...] = (Door.GONE,),
) -> StateMachine:
    return StateMachine("Door", Door, initial=initial, terminal=terminal, transitions=transitions)


def test_the_good_door_table_is_accepted_so_each_bad_one_fails_for_its_own_offence() -> None:
    machine = door_machine()
    assert len(machine) == 3
    assert machine.is_terminal(Door.GONE)


def test_a_duplicate_transition_name_is_rejected_naming_it() -> None:
    twice = Transition("close", Door.OPEN, Door.GONE)
    with pytest.raises(ValueError, match="duplicate transition names") as caught:
        door_machine((*GOOD_TABLE, twice))
    assert "'close'" in str(caught.value)
    assert "Door" in str(caught.value)


def test_a_duplicate_edge_is_rejected_naming_its_states() -> None:
    shut = Transition("shut", Door.OPEN, Door.CLOSED)
    with pytest.raises(ValueError, match="duplicate edges") as caught:
        door_machine((*GOOD_TABLE, shut))
    assert "open->closed" in str(caught.value)


def test_an_edge_out_of_a_terminal_state_is_rejected_naming_it() -> None:
    rebuild = Transition("rebuild", Door.GONE, Door.OPEN)
    with pytest.raises(ValueError, match="edges out of a terminal state") as caught:
        door_machine((*GOOD_TABLE, rebuild))
    assert "'rebuild'" in str(caught.value)


def test_a_dead_end_is_rejected_naming_the_state_with_no_way_out() -> None:
    # Without "close", an open door can never change again, yet "open" is not terminal.
    with pytest.raises(ValueError, match="dead ends") as caught:
        door_machine((REOPEN, DEMOLISH))
    assert "'open'" in str(caught.value)
    assert "'closed'" not in str(caught.value)


def test_a_terminal_state_needs_no_way_out() -> None:
    # The same table is fine once "open" is declared terminal: no dead end remains.
    machine = door_machine((REOPEN, DEMOLISH), terminal=(Door.GONE, Door.OPEN))
    assert machine.is_terminal(Door.OPEN)


# A member of another enum that shares a value with one of ours compares equal to it
# (StrEnum), so only an isinstance check tells the two apart: each case is tested both
# with and without a shared value.
FOREIGN = [
    pytest.param(Window.SHUT, id="no-shared-value"),
    pytest.param(Window.OPEN, id="shared-value"),
]


@pytest.mark.parametrize("foreign", FOREIGN)
def test_a_state_of_another_enum_in_a_transition_is_rejected_naming_the_edge(
    foreign: Window,
) -> None:
    leak = Transition("leak", Door.OPEN, foreign)
    with pytest.raises(ValueError, match="states not of Door") as caught:
        door_machine((*GOOD_TABLE, leak))
    assert "leak" in str(caught.value)
    assert repr(foreign) in str(caught.value)


@pytest.mark.parametrize("foreign", FOREIGN)
def test_an_initial_state_of_another_enum_is_rejected_naming_it(foreign: Window) -> None:
    with pytest.raises(ValueError, match="states not of Door") as caught:
        door_machine(initial=foreign)
    assert f"initial: {foreign!r}" in str(caught.value)


@pytest.mark.parametrize("foreign", FOREIGN)
def test_a_terminal_state_of_another_enum_is_rejected_naming_it(foreign: Window) -> None:
    with pytest.raises(ValueError, match="states not of Door") as caught:
        door_machine(terminal=(Door.GONE, foreign))
    assert f"terminal: {foreign!r}" in str(caught.value)


def test_a_cross_machine_table_is_rejected_not_silently_accepted() -> None:
    # The real failure this rule guards against: a TaskRun state typed into the
    # WorkflowRun table. "ready" has no WorkflowRun counterpart at all.
    with pytest.raises(ValueError, match="states not of WorkflowRunState") as caught:
        StateMachine(
            "WorkflowRun",
            WorkflowRunState,
            initial=WorkflowRunState.PENDING,
            terminal=(WorkflowRunState.SUCCEEDED,),
            transitions=(
                Transition("start", WorkflowRunState.PENDING, TaskRunState.READY),
                Transition("succeed", WorkflowRunState.RUNNING, WorkflowRunState.SUCCEEDED),
            ),
        )
    assert "start" in str(caught.value)
