"""The workflow definition model: every rule has a bad definition that breaks it, and the
message must name the offence (field path, keys, cycle members)."""

from __future__ import annotations

import itertools
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from flowforge.aggregates.definition import (
    RetryPolicy,
    TaskDefinition,
    WorkflowDefinition,
    parse_definition,
)
from flowforge.errors import InvalidWorkflowDefinitionError

CYCLE = re.compile(r"dependency cycle (\w+(?: -> \w+)+)")


def task(key: str, *depends_on: str, **fields: Any) -> dict[str, Any]:
    return {"key": key, "type": "work", "depends_on": list(depends_on), **fields}


def workflow(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": "wf", "tasks": list(tasks), **fields}


def problems(data: Any) -> list[str]:
    """The lines of the error ``parse_definition`` raises for ``data``."""
    with pytest.raises(InvalidWorkflowDefinitionError) as caught:
        parse_definition(data)
    return str(caught.value).splitlines()


def cycle_in(message: str) -> list[str]:
    match = CYCLE.search(message)
    assert match, message
    return match.group(1).split(" -> ")


# --- RetryPolicy ---------------------------------------------------------------------


def test_a_retry_policy_has_the_issues_defaults() -> None:
    assert RetryPolicy() == RetryPolicy(
        max_attempts=3,
        backoff_seconds=1.0,
        backoff_multiplier=2.0,
        backoff_cap_seconds=60.0,
        jitter=0.1,
    )
    assert RetryPolicy().max_attempts == 3
    assert RetryPolicy().jitter == 0.1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", "3"),
        ("max_attempts", True),
        ("backoff_seconds", -0.5),
        ("backoff_multiplier", 0.5),
        ("backoff_cap_seconds", -1),
        ("backoff_cap_seconds", float("inf")),
        ("jitter", 1.5),
        ("jitter", -0.1),
        ("jitter", float("nan")),
    ],
)
def test_an_out_of_range_retry_setting_is_rejected_naming_its_field(
    field: str, value: object
) -> None:
    lines = problems(workflow(task("a"), retry={field: value}))
    assert len(lines) == 1
    assert lines[0].startswith(f"retry.{field}: ")


def test_the_delay_grows_exponentially_until_the_cap() -> None:
    policy = RetryPolicy(backoff_seconds=1, backoff_multiplier=3, backoff_cap_seconds=20, jitter=0)
    delays = [policy.delay_for(n, rand=0.5).total_seconds() for n in range(1, 6)]
    assert delays == [1, 3, 9, 20, 20]


def test_jitter_spreads_the_delay_by_its_fraction_either_way() -> None:
    policy = RetryPolicy(backoff_seconds=10, backoff_cap_seconds=60, jitter=0.2)
    assert policy.delay_for(1, rand=0.0) == timedelta(seconds=8)
    assert policy.delay_for(1, rand=0.5) == timedelta(seconds=10)
    assert policy.delay_for(1, rand=0.75) == timedelta(seconds=11)


def test_jitter_never_pushes_a_capped_delay_past_the_cap() -> None:
    policy = RetryPolicy(backoff_seconds=100, backoff_cap_seconds=60, jitter=0.5)
    assert policy.delay_for(1, rand=0.99) == timedelta(seconds=60)
    assert policy.delay_for(1, rand=0.0) == timedelta(seconds=30)


def test_a_huge_attempt_number_gives_the_cap_instead_of_overflowing() -> None:
    assert RetryPolicy(jitter=0).delay_for(100_000, rand=0.5) == timedelta(seconds=60)


def test_a_zero_backoff_stays_zero_however_many_attempts_failed() -> None:
    policy = RetryPolicy(backoff_seconds=0)
    assert policy.delay_for(100_000, rand=0.9) == timedelta(0)


@pytest.mark.parametrize("failed_attempt", [0, -1])
def test_delay_for_rejects_an_attempt_before_the_first(failed_attempt: int) -> None:
    with pytest.raises(ValueError, match="failed_attempt must be >= 1"):
        RetryPolicy().delay_for(failed_attempt, rand=0.5)


@pytest.mark.parametrize("rand", [1.0, -0.01, float("nan")])
def test_delay_for_rejects_a_rand_outside_the_unit_interval(rand: float) -> None:
    with pytest.raises(ValueError, match=r"rand must be in \[0, 1\)"):
        RetryPolicy().delay_for(1, rand=rand)


def test_a_retry_policy_cannot_be_changed_after_it_is_built() -> None:
    policy = RetryPolicy()
    with pytest.raises(ValidationError):
        policy.max_attempts = 9  # type: ignore[misc]
    assert policy.max_attempts == 3


policies = st.builds(
    RetryPolicy,
    backoff_seconds=st.floats(0, 1_000),
    backoff_multiplier=st.floats(1, 10),
    backoff_cap_seconds=st.floats(0, 10_000),
    jitter=st.floats(0, 1),
)
rands = st.floats(0, 1, exclude_max=True)


@settings(max_examples=200)
@given(policies, st.integers(1, 10_000), rands)
def test_every_delay_is_between_zero_and_the_cap(
    policy: RetryPolicy, failed_attempt: int, rand: float
) -> None:
    seconds = policy.delay_for(failed_attempt, rand).total_seconds()
    # timedelta rounds to the microsecond, so allow that much over the cap.
    assert 0 <= seconds <= policy.backoff_cap_seconds + 1e-6


@settings(max_examples=100)
@given(policies, st.integers(1, 200), rands)
def test_without_jitter_the_delay_never_shrinks_as_attempts_fail(
    policy: RetryPolicy, failed_attempt: int, rand: float
) -> None:
    steady = policy.model_copy(update={"jitter": 0.0})
    assert steady.delay_for(failed_attempt, rand) <= steady.delay_for(failed_attempt + 1, rand)


@settings(max_examples=100)
@given(policies, st.integers(1, 50), rands)
def test_jitter_moves_the_delay_by_at_most_its_fraction(
    policy: RetryPolicy, failed_attempt: int, rand: float
) -> None:
    steady = policy.model_copy(update={"jitter": 0.0}).delay_for(failed_attempt, rand)
    jittered = policy.delay_for(failed_attempt, rand)
    bound = steady.total_seconds() * policy.jitter + 2e-6  # two microsecond roundings
    assert abs(jittered.total_seconds() - steady.total_seconds()) <= bound


# --- TaskDefinition ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("key", "my-task"), ("key", "1st"), ("key", ""), ("type", "billing.charge")],
)
def test_a_task_key_or_type_must_be_a_plain_identifier(field: str, value: str) -> None:
    lines = problems(workflow({**task("a"), field: value}))
    assert lines == [
        f"tasks[0].{field}: {value!r} is not a plain identifier "
        "(letters, digits and underscores, not starting with a digit)"
    ]


def test_a_dependency_listed_twice_is_rejected_naming_it() -> None:
    lines = problems(workflow(task("a"), task("b", "a", "a")))
    assert lines == ["tasks[1].depends_on: duplicate dependency 'a': list each task once"]


def test_a_task_depending_on_itself_is_rejected_as_a_cycle() -> None:
    lines = problems(workflow(task("a", "a")))
    assert lines == ["tasks[0].depends_on: task 'a' depends on itself: dependency cycle a -> a"]


def test_a_task_depending_on_itself_is_rejected_when_built_alone() -> None:
    with pytest.raises(ValidationError, match="dependency cycle a -> a"):
        TaskDefinition(key="a", type="work", depends_on=("a",))


@pytest.mark.parametrize("lease", [0, -1.5])
def test_a_task_lease_must_be_positive(lease: float) -> None:
    (line,) = problems(workflow(task("a", lease_seconds=lease)))
    assert line == f"tasks[0].lease_seconds: must be more than 0.0, got {lease}"


def test_depends_on_must_be_a_list_not_a_single_key() -> None:
    (line,) = problems(workflow(task("a"), {"key": "b", "type": "work", "depends_on": "a"}))
    assert line.startswith("tasks[1].depends_on: ")


def test_a_misspelt_task_field_is_an_error_not_a_silent_default() -> None:
    lines = problems(workflow(task("a"), {"key": "b", "type": "work", "dependson": ["a"]}))
    assert lines == ["tasks[1].dependson: unknown key 'dependson'; did you mean 'depends_on'?"]


# --- WorkflowDefinition: validation --------------------------------------------------


def test_a_workflow_without_tasks_is_rejected() -> None:
    assert problems(workflow()) == ["tasks: a workflow needs at least one task"]


def test_a_workflow_without_a_tasks_field_is_rejected_naming_it() -> None:
    assert problems({"name": "wf"}) == ["tasks: missing: this key is required"]


def test_duplicate_task_keys_are_rejected_naming_the_first_place_too() -> None:
    lines = problems(workflow(task("a"), task("a"), task("b"), task("a")))
    assert lines == [
        "tasks[1].key: duplicate task key 'a' (also tasks[0].key)",
        "tasks[3].key: duplicate task key 'a' (also tasks[0].key)",
    ]


def test_an_unknown_dependency_is_rejected_naming_task_key_and_known_keys() -> None:
    lines = problems(workflow(task("a"), task("b", "a", "c")))
    assert lines == ["tasks[1].depends_on: unknown dependency 'c' of task 'b' (known: a, b)"]


def test_a_cycle_is_rejected_naming_its_tasks_in_order() -> None:
    lines = problems(workflow(task("a", "c"), task("b", "a"), task("c", "b")))
    assert lines == [
        "tasks[0].depends_on: dependency cycle a -> c -> b -> a (each task depends on the next)"
    ]


def test_a_cycle_is_named_from_its_earliest_defined_task() -> None:
    lines = problems(workflow(task("p", "c"), task("a", "b"), task("b", "c"), task("c", "a")))
    assert lines == [
        "tasks[1].depends_on: dependency cycle a -> b -> c -> a (each task depends on the next)"
    ]


def test_a_cycle_message_leaves_out_tasks_merely_downstream_of_it() -> None:
    lines = problems(workflow(task("x"), task("w", "y"), task("y", "z"), task("z", "y")))
    assert len(lines) == 1
    assert cycle_in(lines[0]) == ["y", "z", "y"]
    assert lines[0].startswith("tasks[2].depends_on: ")


def test_every_cross_task_problem_is_reported_at_once_one_per_line() -> None:
    lines = problems(workflow(task("a"), task("a", "q"), task("b", "r")))
    assert lines == [
        "tasks[1].key: duplicate task key 'a' (also tasks[0].key)",
        "tasks[1].depends_on: unknown dependency 'q' of task 'a' (known: a, b)",
        "tasks[2].depends_on: unknown dependency 'r' of task 'b' (known: a, b)",
    ]


def test_a_workflow_name_must_be_a_plain_identifier() -> None:
    (line,) = problems(workflow(task("a"), name="my-workflow"))
    assert line.startswith("name: 'my-workflow' is not a plain identifier")


@pytest.mark.parametrize("lease", [0, -1, "30"])
def test_a_workflow_lease_must_be_a_positive_number(lease: object) -> None:
    (line,) = problems(workflow(task("a"), lease_seconds=lease))
    assert line.startswith("lease_seconds: ")


def test_a_misspelt_workflow_field_is_an_error_not_a_silent_default() -> None:
    assert problems(workflow(task("a"), lease_second=5)) == [
        "lease_second: unknown key 'lease_second'; did you mean 'lease_seconds'?"
    ]


def test_building_a_workflow_directly_raises_the_same_clear_text() -> None:
    with pytest.raises(ValidationError) as caught:
        WorkflowDefinition(
            name="wf",
            tasks=(
                TaskDefinition(key="a", type="work", depends_on=("b",)),
                TaskDefinition(key="b", type="work", depends_on=("a",)),
            ),
        )
    assert isinstance(caught.value, ValueError)
    assert "tasks[0].depends_on: dependency cycle a -> b -> a" in str(caught.value)


def test_a_workflow_cannot_be_changed_after_it_is_built() -> None:
    definition = parse_definition(workflow(task("a")))
    with pytest.raises(ValidationError):
        definition.name = "other"  # type: ignore[misc]
    assert definition.name == "wf"


# --- WorkflowDefinition: queries -----------------------------------------------------


def test_task_finds_a_task_by_key() -> None:
    definition = parse_definition(workflow(task("a"), task("b", "a")))
    assert definition.task("b").depends_on == ("a",)


def test_an_unknown_task_key_is_a_key_error_listing_the_known_keys() -> None:
    definition = parse_definition(workflow(task("a"), task("b")))
    with pytest.raises(KeyError, match=r"no task 'zz' in workflow 'wf' \(known: a, b\)"):
        definition.task("zz")


def test_a_task_without_its_own_retry_policy_or_lease_uses_the_workflows() -> None:
    definition = parse_definition(
        workflow(
            task("a"),
            task("b", retry={"max_attempts": 7}, lease_seconds=5),
            retry={"max_attempts": 2},
            lease_seconds=40,
        )
    )
    assert definition.retry_policy_for("a") == RetryPolicy(max_attempts=2)
    assert definition.retry_policy_for("b") == RetryPolicy(max_attempts=7)
    assert definition.lease_seconds_for("a") == 40
    assert definition.lease_seconds_for("b") == 5


def test_the_topological_order_breaks_ties_by_definition_order() -> None:
    definition = parse_definition(workflow(task("x", "y"), task("y"), task("z")))
    # y and z are ready at once: y is defined first; x is ready after y and before z.
    assert definition.topological_order() == ("y", "x", "z")


def test_the_topological_order_puts_every_task_after_its_dependencies() -> None:
    definition = parse_definition(
        workflow(task("d", "b", "c"), task("c", "a"), task("b", "a"), task("a"))
    )
    assert definition.topological_order() == ("a", "c", "b", "d")


def test_dependents_are_the_direct_dependents_in_definition_order() -> None:
    definition = parse_definition(
        workflow(task("a"), task("c", "a"), task("b", "a"), task("d", "b"))
    )
    assert definition.dependents("a") == ("c", "b")
    assert definition.dependents("d") == ()


def test_dependents_of_an_unknown_task_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no task 'q'"):
        parse_definition(workflow(task("a"))).dependents("q")


def test_to_dict_is_json_and_round_trips_to_an_equal_definition() -> None:
    definition = parse_definition(
        workflow(task("a", retry={"jitter": 0}), task("b", "a", lease_seconds=3))
    )
    data = json.loads(json.dumps(definition.to_dict()))
    assert data["tasks"][1]["depends_on"] == ["a"]
    assert WorkflowDefinition.model_validate(data) == definition


def test_a_validation_failure_keeps_pydantics_error_as_its_cause() -> None:
    with pytest.raises(InvalidWorkflowDefinitionError) as caught:
        parse_definition(workflow())
    assert isinstance(caught.value.__cause__, ValidationError)


# --- properties of the graph checks --------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Tasks whose edges only go from a later task to an earlier one, defined in a
    shuffled order (so definition order alone does not sort them)."""
    size = draw(st.integers(1, 12))
    keys = [f"t{i}" for i in range(size)]
    tasks = [
        task(key, *draw(st.lists(st.sampled_from(keys[:i]), unique=True)) if i else ())
        for i, key in enumerate(keys)
    ]
    return draw(st.permutations(tasks))


@settings(max_examples=100)
@given(dags())
def test_a_random_dag_is_accepted_and_ordered_after_every_dependency(
    tasks: list[dict[str, Any]],
) -> None:
    definition = parse_definition(workflow(*tasks))
    order = definition.topological_order()
    assert sorted(order) == sorted(t["key"] for t in tasks)
    position = {key: i for i, key in enumerate(order)}
    for t in tasks:
        for dependency in t["depends_on"]:
            assert position[dependency] < position[t["key"]]


@settings(max_examples=100)
@given(dags(), st.data())
def test_a_back_edge_closing_a_cycle_is_rejected_naming_a_real_cycle(
    tasks: list[dict[str, Any]], data: st.DataObject
) -> None:
    by_key = {t["key"]: t for t in tasks}
    with_dependencies = [t for t in tasks if t["depends_on"]]
    if not with_dependencies:
        tasks = [task("t0"), task("t1", "t0")]
        by_key = {t["key"]: t for t in tasks}
        with_dependencies = [tasks[1]]
    # Walk down dependencies from some task, then make the walk's end depend on its start.
    top = data.draw(st.sampled_from(with_dependencies))
    bottom = top
    while bottom["depends_on"] and (bottom is top or data.draw(st.booleans())):
        bottom = by_key[data.draw(st.sampled_from(bottom["depends_on"]))]
    bottom["depends_on"].append(top["key"])

    (line,) = problems(workflow(*tasks))
    cycle = cycle_in(line)
    assert cycle[0] == cycle[-1]
    assert len(set(cycle[:-1])) == len(cycle) - 1
    for task_key, dependency in itertools.pairwise(cycle):
        assert dependency in by_key[task_key]["depends_on"]


@settings(max_examples=50)
@given(dags())
def test_a_random_dag_round_trips_through_to_dict(tasks: list[dict[str, Any]]) -> None:
    definition = parse_definition(workflow(*tasks))
    restored = WorkflowDefinition.model_validate(json.loads(json.dumps(definition.to_dict())))
    assert restored == definition
    assert restored.topological_order() == definition.topological_order()


def test_a_problem_reads_in_the_files_words_not_pydantics() -> None:
    """Issue #49: `Input should be...`, `type=...` became what the field must be."""
    bad = {"key": "b", "type": "work", "max_running": "x", "depend_on": ["a"]}
    lines = problems(workflow(task("a"), bad, retry={"max_attempts": 0}))
    assert sorted(lines) == [
        "retry.max_attempts: must be at least 1, got 0",
        "tasks[1].depend_on: unknown key 'depend_on'; did you mean 'depends_on'?",
        'tasks[1].max_running: must be a whole number, got "x"',
    ]
