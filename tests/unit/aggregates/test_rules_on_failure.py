"""The run-state derivation under each ``on_failure`` policy, as properties over
generated DAGs and task states: fail_fast is the spec's precedence unchanged; under
finish_branches the run is never finished while a task not downstream of a failure can
still run, and once nothing can run it failed iff a task failed for good."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge.aggregates import rules
from flowforge.aggregates.definition import parse_definition
from flowforge.aggregates.on_failure import OnFailure
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.errors import InvalidWorkflowDefinitionError

T = TaskRunState
W = WorkflowRunState
CAN_RUN = frozenset({T.PENDING, T.READY, T.RUNNING, T.RETRYING})
FINISHED = frozenset({W.SUCCEEDED, W.FAILED})

Deps = Mapping[str, frozenset[str]]
States = Mapping[str, TaskRunState]


@st.composite
def runs(draw: st.DrawFn) -> tuple[Deps, dict[str, TaskRunState]]:
    """A DAG of up to 10 tasks (each depends on some earlier ones) and a state each."""
    count = draw(st.integers(1, 10))
    keys = [f"t{i}" for i in range(count)]
    deps = {
        key: frozenset(draw(st.lists(st.sampled_from(keys[:i]), max_size=3))) if i else frozenset()
        for i, key in enumerate(keys)
    }
    states = {key: draw(st.sampled_from(TaskRunState)) for key in keys}
    return deps, states


def branches(states: States, deps: Deps) -> W:
    return rules.derive_run_state(OnFailure.FINISH_BRANCHES, states, deps)


def not_downstream(states: States, deps: Deps) -> dict[str, TaskRunState]:
    blocked = rules.downstream_of_failures(states, deps)
    return {key: state for key, state in states.items() if key not in blocked}


@settings(max_examples=300)
@given(runs())
def test_fail_fast_is_the_specs_precedence_unchanged(run: tuple[Deps, States]) -> None:
    deps, states = run
    spec = rules.derive_workflow_run_state(states.values())
    assert rules.derive_run_state(OnFailure.FAIL_FAST, states, deps) is spec


@settings(max_examples=300)
@given(runs())
def test_with_no_task_failed_for_good_both_policies_agree(run: tuple[Deps, States]) -> None:
    deps, states = run
    states = {k: T.CANCELLED if s is T.FAILED else s for k, s in states.items()}
    assert branches(states, deps) is rules.derive_workflow_run_state(states.values())


@settings(max_examples=300)
@given(runs())
def test_the_run_never_finishes_while_a_task_not_downstream_of_a_failure_can_run(
    run: tuple[Deps, States],
) -> None:
    deps, states = run
    if any(s in CAN_RUN for s in not_downstream(states, deps).values()):
        assert branches(states, deps) not in FINISHED


@settings(max_examples=300)
@given(runs())
def test_once_nothing_can_run_the_run_failed_iff_a_task_failed_for_good(
    run: tuple[Deps, States],
) -> None:
    deps, states = run
    counted = not_downstream(states, deps)
    if any(s in CAN_RUN or s is T.CANCELLED for s in counted.values()):
        return  # something can run, or a user cancelled: the properties above and below
    derived = branches(states, deps)
    assert (derived is W.FAILED) is (T.FAILED in states.values())
    if T.FAILED not in states.values():
        assert derived is W.SUCCEEDED


@settings(max_examples=300)
@given(runs())
def test_a_cancel_not_downstream_of_a_failure_wins_as_in_the_spec(
    run: tuple[Deps, States],
) -> None:
    deps, states = run
    if T.CANCELLED in not_downstream(states, deps).values():
        assert branches(states, deps) is W.CANCELLED


@settings(max_examples=300)
@given(runs(), st.data())
def test_what_is_downstream_of_a_failure_does_not_count(
    run: tuple[Deps, States], data: st.DataObject
) -> None:
    """Its cancels (upstream_failed) and any state it is in leave the run's state as is."""
    deps, states = run
    blocked = rules.downstream_of_failures(states, deps)
    changed = {
        k: data.draw(st.sampled_from(TaskRunState)) if k in blocked else s
        for k, s in states.items()
    }
    assert rules.downstream_of_failures(changed, deps) == blocked
    assert branches(changed, deps) is branches(states, deps)


def test_downstream_is_transitive_and_excludes_the_roots_and_other_branches() -> None:
    deps = {
        "a": frozenset(),
        "b": frozenset({"a"}),
        "c": frozenset({"b"}),
        "d": frozenset(),
        "e": frozenset({"d", "b"}),
    }
    assert rules.downstream_of(["a"], deps) == {"b", "c", "e"}
    assert rules.downstream_of(["d"], deps) == {"e"}
    assert rules.downstream_of([], deps) == frozenset()


def test_the_independent_branch_keeps_the_run_running_then_it_fails() -> None:
    deps = {"a1": frozenset(), "b1": frozenset(), "b2": frozenset({"b1"})}
    running = {"a1": T.RUNNING, "b1": T.FAILED, "b2": T.PENDING}
    assert branches(running, deps) is W.RUNNING
    assert rules.derive_run_state(OnFailure.FAIL_FAST, running, deps) is W.FAILED
    ended = {"a1": T.SUCCEEDED, "b1": T.FAILED, "b2": T.CANCELLED}
    assert branches(ended, deps) is W.FAILED


def test_the_option_is_fail_fast_by_default_and_only_takes_the_two_policies() -> None:
    tasks = [{"key": "a", "type": "work"}]
    assert parse_definition({"name": "w", "tasks": tasks}).on_failure is OnFailure.FAIL_FAST
    chosen = parse_definition({"name": "w", "tasks": tasks, "on_failure": "finish_branches"})
    assert chosen.on_failure is OnFailure.FINISH_BRANCHES
    assert chosen.to_dict()["on_failure"] == "finish_branches"
    with pytest.raises(InvalidWorkflowDefinitionError, match="on_failure"):
        parse_definition({"name": "w", "tasks": tasks, "on_failure": "carry_on"})
