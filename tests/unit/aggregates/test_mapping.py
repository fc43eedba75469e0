"""The pure rules of mapped tasks (``map_over``): keys, the definition's checks, the
result's checks, and a mapped task's state from its upstream and its elements."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from flowforge import errors
from flowforge.aggregates import mapping, run_plan, task_run
from flowforge.aggregates.definition import parse_definition
from flowforge.aggregates.states import TaskRunState

_T = TaskRunState


def workflow(*tasks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "w", "tasks": [{"key": "a", "type": "a"}, *tasks], **extra}


def test_an_element_key_names_its_mapped_task_and_index_and_nothing_else_does() -> None:
    assert mapping.element_key("process", 12) == "process[12]"
    assert mapping.element_of("process[12]") == ("process", "12")
    assert mapping.element_index("process[12]") == 12
    assert mapping.element_of("process[a.csv]") == ("process", "a.csv")  # a map_key's
    assert mapping.element_index("process[a.csv]") is None
    assert mapping.element_index("process[01]") is None
    for key in ("process", "process[]", "p[1]x", "p[[1]]", "[1]"):
        assert mapping.element_of(key) is None, key
    assert mapping.mapped_task_of("process[3]") == "process"
    assert mapping.mapped_task_of("load") == "load"


def test_map_over_implies_the_dependency_and_the_definition_resolves_element_keys() -> None:
    definition = parse_definition(workflow({"key": "b", "type": "b", "map_over": "a"}))
    assert definition.task("b").depends_on == ("a",)
    assert definition.task("b[7]").key == "b"
    assert definition.mapped_over("a") == ("b",)
    assert definition.max_map_elements == mapping.DEFAULT_MAX_MAP_ELEMENTS >= 10_000


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"key": "b", "type": "b", "map_over": "b"}, "depends on itself"),
        ({"key": "b", "type": "b", "map_over": "zz"}, "unknown dependency 'zz'"),
        (
            {"key": "b", "type": "b", "map_over": "a", "depends_on": ["c"]},
            "may depend on nothing else",
        ),
    ],
)
def test_a_bad_map_is_refused_at_definition_time(task: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match=message):
        parse_definition(workflow(task, {"key": "c", "type": "c"}))


def test_a_nested_map_is_refused_with_what_to_do_instead() -> None:
    nested = workflow(
        {"key": "b", "type": "b", "map_over": "a"}, {"key": "c", "type": "c", "map_over": "b"}
    )
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match="nested maps are not"):
        parse_definition(nested)


@pytest.mark.parametrize("bound", [0, mapping.MAX_MAP_ELEMENTS + 1, 1.5])
def test_the_bound_is_checked(bound: Any) -> None:
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match="max_map_elements"):
        parse_definition(workflow(max_map_elements=bound))


def test_a_result_must_be_a_list_no_longer_than_the_bound() -> None:
    assert mapping.result_problem([1, 2], "a", ["b"], 2) is None
    assert mapping.result_problem([], "a", ["b"], 2) is None
    not_a_list = mapping.result_problem({"x": 1}, "a", ["b"], 2)
    assert not_a_list is not None
    assert "returned dict, not a list" in not_a_list
    too_long = mapping.result_problem([1, 2, 3], "a", ["b"], 2)
    assert too_long is not None
    assert "3 elements, more than the workflow's max_map_elements (2)" in too_long
    assert mapping.map_error(too_long)["type"] == "MapOverError"


@pytest.mark.parametrize(
    ("upstream", "count", "elements", "expected"),
    [
        (_T.RUNNING, 0, {}, _T.PENDING),
        (None, 0, {}, _T.PENDING),
        (_T.SUCCEEDED, 0, {}, _T.SUCCEEDED),  # an empty list: done at once
        (_T.SUCCEEDED, 2, {0: _T.SUCCEEDED, 1: _T.SUCCEEDED}, _T.SUCCEEDED),
        (_T.SUCCEEDED, 2, {0: _T.SUCCEEDED}, _T.PENDING),  # one not read
        (_T.SUCCEEDED, 2, {0: _T.SUCCEEDED, 1: _T.RUNNING}, _T.RUNNING),
        (_T.SUCCEEDED, 2, {0: _T.FAILED, 1: _T.RUNNING}, _T.FAILED),
        (_T.SUCCEEDED, 2, {0: _T.FAILED, 1: _T.CANCELLED}, _T.CANCELLED),
        (_T.SUCCEEDED, 2, {0: _T.RETRYING, 1: _T.READY}, _T.RETRYING),
    ],
)
def test_a_mapped_tasks_state_comes_from_its_upstream_and_its_elements(
    upstream: TaskRunState | None,
    count: int,
    elements: dict[int, TaskRunState],
    expected: TaskRunState,
) -> None:
    assert mapping.mapped_state(upstream, count, elements) is expected


def test_an_expansions_events_equal_the_ones_a_new_aggregate_makes() -> None:
    definition = parse_definition(workflow({"key": "b", "type": "b", "map_over": "a"}))
    run_id, at = uuid4(), datetime(2026, 1, 1, tzinfo=UTC)
    events = run_plan.expansion_events(definition, run_id, "a", ["x", {"y": 1}], at=at, actor="w")
    assert [e.task_key for e in events] == ["b[0]", "b[1]"]
    for index, event in enumerate(events):
        made = task_run.created_event(
            event.originator_id,
            at=at,
            workflow_run_id=run_id,
            task_key=f"b[{index}]",
            task_type="b",
            depends_on=["a"],
            max_attempts=definition.retry_policy_for("b").max_attempts,
            lease_seconds=definition.lease_seconds_for("b"),
            timeout_seconds=None,
            max_running=None,
            max_worker_losses=definition.max_worker_losses_for("b"),
            state=_T.READY,
            actor="w",
            map_index=index,
            map_item=["x", {"y": 1}][index],
        )
        assert vars(made) == vars(event)
        assert type(made) is type(event)


def test_the_python_api_declares_a_map_as_the_file_does() -> None:
    from flowforge.aggregates.definition import TaskDefinition, WorkflowDefinition

    built = WorkflowDefinition(
        name="w",
        tasks=(
            TaskDefinition(key="a", type="a"),
            TaskDefinition(key="b", type="b", map_over="a"),
            TaskDefinition(key="c", type="c", depends_on=("b",)),
        ),
        max_map_elements=50,
    )
    parsed = parse_definition(built.to_dict())
    assert parsed == built
    assert parsed.task("b").depends_on == ("a",)
    assert parsed.mapped_over("a") == ("b",)
