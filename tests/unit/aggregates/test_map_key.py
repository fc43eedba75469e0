"""A mapped task's elements keyed by a field of each element (``map_key``, issue 46):
the definition's rule and the result's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flowforge import errors
from flowforge.aggregates import mapping
from flowforge.aggregates.definition import TaskDefinition, WorkflowDefinition, parse_definition
from tests.unit.aggregates.test_mapping import workflow


def test_element_keys_come_from_the_map_key_else_the_index() -> None:
    files = [{"id": "a.csv"}, {"id": 7}]
    assert mapping.element_keys("p", files, "id") == ["p[a.csv]", "p[7]"]
    assert mapping.element_keys("p", files) == ["p[0]", "p[1]"]
    assert mapping.element_keys("p", None, "id") == []


def test_a_map_key_needs_a_map_over() -> None:
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match="map_key but no map_over"):
        parse_definition(workflow({"key": "b", "type": "b", "map_key": "id"}))
    keyed = parse_definition(workflow({"key": "b", "type": "b", "map_over": "a", "map_key": "id"}))
    assert keyed.task("b").map_key == "id"
    assert keyed.task("b[a.csv]").key == "b"


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ([{"id": "x"}, {"name": "y"}], "element 1 of the list 'b' maps over has no 'id'"),
        ([{"id": "x"}, "y"], "element 1 .* has no 'id'"),
        ([{"id": True}], "has no 'id' .* a string or an integer"),
        ([{"id": 1.5}], "has no 'id'"),
        ([{"id": ""}], "1 to 200 characters without brackets"),
        ([{"id": "a]"}], "without brackets"),
        ([{"id": "x"}, {"id": "y"}, {"id": "x"}], "element 2 .* 'x', as element 0 has"),
        ([{"id": 1}, {"id": "1"}], "element 1 .* '1', as element 0 has"),
    ],
)
def test_a_list_whose_elements_cannot_be_keyed_is_refused(result: Any, message: str) -> None:
    problem = mapping.result_problem(result, "a", ["b"], 10, {"b": "id"})
    assert problem is not None
    assert problem.startswith("task 'a' returned a list that 'b' cannot key: ")
    assert re.search(message, problem), problem


def test_a_keyed_list_with_every_key_usable_is_accepted() -> None:
    result = [{"id": "x"}, {"id": 2}, {"id": "y z"}]
    assert mapping.result_problem(result, "a", ["b"], 10, {"b": "id"}) is None
    assert mapping.result_problem([1, 2], "a", ["b"], 10, {"b": None}) is None


def test_the_python_api_declares_a_keyed_map_as_the_file_does() -> None:
    built = WorkflowDefinition(
        name="w",
        tasks=(
            TaskDefinition(key="a", type="a"),
            TaskDefinition(key="b", type="b", map_over="a", map_key="id"),
        ),
    )
    assert parse_definition(built.to_dict()) == built
    assert parse_definition(built.to_dict()).task("b").map_key == "id"
