"""Which tasks a rerun carries over and which run again (pure; property-tested)."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge import errors
from flowforge.aggregates import rerun
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import Provenance

RUN_ID = UUID("00000000-0000-4000-8000-000000000001")
TASK_ID = UUID("00000000-0000-4000-8000-000000000002")
DIAMOND = WorkflowDefinition.model_validate(
    {
        "name": "diamond",
        "tasks": [
            {"key": "a", "type": "t"},
            {"key": "b", "type": "t", "depends_on": ["a"]},
            {"key": "c", "type": "t", "depends_on": ["a"]},
            {"key": "d", "type": "t", "depends_on": ["b", "c"]},
        ],
    }
)


@st.composite
def dags(draw: st.DrawFn) -> WorkflowDefinition:
    """A DAG of up to 7 tasks, each depending on some of the ones before it."""
    count = draw(st.integers(min_value=1, max_value=7))
    tasks = []
    for i in range(count):
        earlier = [f"t{j}" for j in range(i)]
        depends_on = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        tasks.append({"key": f"t{i}", "type": "t", "depends_on": depends_on})
    return WorkflowDefinition.model_validate({"name": "w", "tasks": tasks})


@st.composite
def finished_runs(draw: st.DrawFn) -> tuple[WorkflowDefinition, frozenset[str]]:
    """A DAG and the tasks that succeeded in a run of it: a task can only have
    succeeded if every dependency did (it ran after them)."""
    definition = draw(dags())
    succeeded: set[str] = set()
    for key in definition.topological_order():
        deps_ok = all(d in succeeded for d in definition.task(key).depends_on)
        if deps_ok and draw(st.booleans()):
            succeeded.add(key)
    return definition, frozenset(succeeded)


def keys_of(definition: WorkflowDefinition) -> list[str]:
    return [t.key for t in definition.tasks]


def results(keys: frozenset[str]) -> dict[str, rerun.CarriedResult]:
    return {k: rerun.CarriedResult(k.upper(), Provenance(RUN_ID, TASK_ID, 1)) for k in keys}


@given(finished_runs(), st.data())
def test_a_task_is_carried_over_iff_it_succeeded_and_is_not_named_nor_downstream_of_one(
    run: tuple[WorkflowDefinition, frozenset[str]], data: st.DataObject
) -> None:
    definition, succeeded = run
    named = data.draw(st.lists(st.sampled_from(keys_of(definition)), unique=True))
    carried = rerun.carried_over(definition, succeeded, named)
    for task in definition.tasks:
        upstream_of_it = {n for n in named if task.key in rerun.downstream(definition, [n])}
        expected = task.key in succeeded and not upstream_of_it
        assert (task.key in carried) is expected, task.key


@given(finished_runs(), st.data())
def test_the_carried_over_tasks_are_closed_upstream(
    run: tuple[WorkflowDefinition, frozenset[str]], data: st.DataObject
) -> None:
    # So the results a rerun's handlers read upstream are all carried ones or new ones,
    # never a mix that skipped a task that runs again.
    definition, succeeded = run
    named = data.draw(st.lists(st.sampled_from(keys_of(definition)), unique=True))
    carried = rerun.carried_over(definition, succeeded, named)
    for key in carried:
        assert set(definition.task(key).depends_on) <= carried, key


@given(finished_runs())
def test_without_from_every_succeeded_task_is_carried_and_every_other_runs_again(
    run: tuple[WorkflowDefinition, frozenset[str]],
) -> None:
    definition, succeeded = run
    assert rerun.carried_over(definition, succeeded, ()) == succeeded


@given(finished_runs(), st.data())
def test_a_task_that_runs_again_is_ready_iff_every_dependency_is_carried_over(
    run: tuple[WorkflowDefinition, frozenset[str]], data: st.DataObject
) -> None:
    definition, succeeded = run
    named = data.draw(st.lists(st.sampled_from(keys_of(definition)), unique=True))
    carried = rerun.carried_over(definition, succeeded, named)
    for task in definition.tasks:
        if task.key not in carried:
            ready = all(d in carried for d in task.depends_on)
            state = rerun.initial_state(task, carried)
            assert state is (TaskRunState.READY if ready else TaskRunState.PENDING)


def test_downstream_of_a_diamonds_side_is_the_side_and_the_join() -> None:
    assert rerun.downstream(DIAMOND, ["b"]) == {"b", "d"}
    assert rerun.downstream(DIAMOND, ["a"]) == {"a", "b", "c", "d"}
    assert rerun.downstream(DIAMOND, []) == frozenset()


def test_a_plan_from_one_side_of_a_diamond_carries_the_root_and_the_other_side() -> None:
    everything = frozenset({"a", "b", "c", "d"})
    plan = rerun.plan(RUN_ID, WorkflowRunState.SUCCEEDED, DIAMOND, results(everything), ["b"])
    assert set(plan.carried) == {"a", "c"}
    assert plan.carried["a"].result == "A"
    assert plan.rerun_of == RUN_ID
    assert plan.initial_state(DIAMOND.task("b")) is TaskRunState.READY
    assert plan.initial_state(DIAMOND.task("d")) is TaskRunState.PENDING


def test_a_plan_names_every_unknown_key_and_lists_the_runs_task_keys() -> None:
    with pytest.raises(errors.UnknownTaskKeyError) as caught:
        rerun.plan(RUN_ID, WorkflowRunState.FAILED, DIAMOND, {}, ["b", "zz", "yy"])
    message = str(caught.value)
    assert "'zz', 'yy'" in message
    assert "'b'" not in message.split("its task keys", maxsplit=1)[0]
    assert "a, b, c, d" in message


@pytest.mark.parametrize("state", [WorkflowRunState.PENDING, WorkflowRunState.RUNNING])
def test_a_plan_of_a_run_that_has_not_finished_says_to_wait_or_cancel(
    state: WorkflowRunState,
) -> None:
    with pytest.raises(errors.RunNotFinishedError, match=f"is {state.value}.*cancel"):
        rerun.plan(RUN_ID, state, DIAMOND, {}, [])


def test_a_plan_that_would_run_nothing_says_so_and_suggests_from() -> None:
    everything = frozenset({"a", "b", "c", "d"})
    with pytest.raises(errors.NothingToRerunError, match="--from"):
        rerun.plan(RUN_ID, WorkflowRunState.SUCCEEDED, DIAMOND, results(everything), [])


@pytest.mark.parametrize("state", list(WorkflowRunState))
def test_an_unknown_key_is_reported_whatever_the_runs_state(state: WorkflowRunState) -> None:
    with pytest.raises(errors.UnknownTaskKeyError):
        rerun.plan(RUN_ID, state, DIAMOND, {}, ["nope"])
