"""The pure rules, as properties over generated task states: the spec's precedence for a
run's derived state, and the initial state of a task run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge.aggregates.rules import derive_workflow_run_state, initial_task_run_state
from flowforge.aggregates.states import TaskRunState, WorkflowRunState

T = TaskRunState
W = WorkflowRunState

any_state = st.sampled_from(TaskRunState)
task_states = st.lists(any_state, max_size=12)


def states_without(*excluded: TaskRunState) -> st.SearchStrategy[list[TaskRunState]]:
    return st.lists(st.sampled_from([s for s in TaskRunState if s not in excluded]), max_size=12)


@st.composite
def with_inserted(
    draw: st.DrawFn, base: st.SearchStrategy[list[TaskRunState]], state: TaskRunState
) -> list[TaskRunState]:
    """A list from ``base`` with ``state`` inserted at a drawn position."""
    states = draw(base)
    states.insert(draw(st.integers(0, len(states))), state)
    return states


# --- the precedence, one property per rank ------------------------------------------


@settings(max_examples=150)
@given(with_inserted(task_states, T.CANCELLED))
def test_1_any_cancelled_task_makes_the_run_cancelled(states: list[TaskRunState]) -> None:
    assert derive_workflow_run_state(states) is W.CANCELLED


@settings(max_examples=150)
@given(with_inserted(states_without(T.CANCELLED), T.FAILED))
def test_2_otherwise_any_failed_task_makes_the_run_failed(states: list[TaskRunState]) -> None:
    assert derive_workflow_run_state(states) is W.FAILED


@settings(max_examples=50)
@given(st.integers(1, 20))
def test_3_otherwise_all_succeeded_makes_the_run_succeeded(count: int) -> None:
    assert derive_workflow_run_state([T.SUCCEEDED] * count) is W.SUCCEEDED


@settings(max_examples=150)
@given(with_inserted(states_without(T.CANCELLED, T.FAILED), T.RUNNING))
def test_4_otherwise_any_running_task_makes_the_run_running(states: list[TaskRunState]) -> None:
    assert derive_workflow_run_state(states) is W.RUNNING


@settings(max_examples=150)
@given(states_without(T.CANCELLED, T.FAILED, T.RUNNING))
def test_5_otherwise_the_run_is_pending(states: list[TaskRunState]) -> None:
    expected = W.SUCCEEDED if states and set(states) == {T.SUCCEEDED} else W.PENDING
    assert derive_workflow_run_state(states) is expected


@settings(max_examples=150)
@given(task_states)
def test_the_run_succeeds_exactly_when_there_are_tasks_and_all_succeeded(
    states: list[TaskRunState],
) -> None:
    all_succeeded = bool(states) and all(s is T.SUCCEEDED for s in states)
    assert (derive_workflow_run_state(states) is W.SUCCEEDED) == all_succeeded


# --- the cases the spec calls out -----------------------------------------------------


def test_cancelled_wins_over_failed_whichever_comes_first() -> None:
    assert derive_workflow_run_state([T.FAILED, T.CANCELLED]) is W.CANCELLED
    assert derive_workflow_run_state([T.CANCELLED, T.FAILED]) is W.CANCELLED


def test_failed_wins_over_running_and_succeeded() -> None:
    assert derive_workflow_run_state([T.SUCCEEDED, T.RUNNING, T.FAILED]) is W.FAILED


def test_an_empty_run_is_pending_not_succeeded() -> None:
    assert derive_workflow_run_state([]) is W.PENDING


def test_a_run_whose_failed_task_will_be_retried_is_not_failed() -> None:
    # The scheduler passes a failed task with attempts left as RETRYING.
    assert derive_workflow_run_state([T.SUCCEEDED, T.RETRYING]) is W.PENDING
    assert derive_workflow_run_state([T.RUNNING, T.RETRYING]) is W.RUNNING


def test_some_succeeded_and_the_rest_waiting_is_pending_not_succeeded() -> None:
    assert derive_workflow_run_state([T.SUCCEEDED, T.PENDING]) is W.PENDING
    assert derive_workflow_run_state([T.SUCCEEDED, T.READY]) is W.PENDING


@settings(max_examples=150)
@given(task_states.flatmap(lambda s: st.tuples(st.just(s), st.permutations(s))))
def test_the_derived_state_does_not_depend_on_the_order_of_the_tasks(
    pair: tuple[list[TaskRunState], list[TaskRunState]],
) -> None:
    states, shuffled = pair
    assert derive_workflow_run_state(shuffled) is derive_workflow_run_state(states)


@settings(max_examples=100)
@given(task_states)
def test_any_iterable_is_accepted_even_a_one_shot_generator(states: list[TaskRunState]) -> None:
    assert derive_workflow_run_state(s for s in states) is derive_workflow_run_state(states)


def test_state_values_are_accepted_as_plain_strings() -> None:
    assert derive_workflow_run_state(["succeeded", "cancelled"]) is W.CANCELLED  # type: ignore[list-item]


def test_an_unknown_task_state_is_rejected() -> None:
    with pytest.raises(ValueError, match="'done'"):
        derive_workflow_run_state(["succeeded", "done"])  # type: ignore[list-item]


# --- initial_task_run_state -----------------------------------------------------------


def test_a_task_without_dependencies_starts_ready() -> None:
    assert initial_task_run_state(0) is T.READY


@settings(max_examples=50)
@given(st.integers(min_value=1, max_value=10**6))
def test_a_task_with_dependencies_starts_pending(count: int) -> None:
    assert initial_task_run_state(count) is T.PENDING


@settings(max_examples=50)
@given(st.integers(max_value=-1, min_value=-(10**6)))
def test_a_negative_dependency_count_is_rejected_naming_it(count: int) -> None:
    with pytest.raises(ValueError, match=f"got {count}$"):
        initial_task_run_state(count)
