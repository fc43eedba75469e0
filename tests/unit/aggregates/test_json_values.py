"""User JSON checked before it reaches an event or a row (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from flowforge.aggregates import json_values
from flowforge.aggregates.json_values import checked_json, error_details


def test_an_error_always_carries_type_message_and_traceback() -> None:
    assert error_details({"type": "E", "message": "m"}) == {
        "traceback": "",
        "type": "E",
        "message": "m",
    }
    with pytest.raises(ValueError, match="missing \\['message'\\]"):
        error_details({"type": "E"})


def test_a_nul_in_an_error_is_written_as_an_escape() -> None:
    details = error_details({"type": "E", "message": "a\x00b", "k\x00ey": "v"})
    assert details["message"] == "a\\x00b" and details["k\\x00ey"] == "v"
    assert not any("\x00" in key + value for key, value in details.items())


def test_an_error_text_that_is_not_unicode_is_made_storable_not_refused() -> None:
    details = error_details({"type": "E", "message": "bad \udcff name"})
    assert details["message"] == "bad \\udcff name"


def test_a_result_that_is_not_json_is_refused_with_what_it_is() -> None:
    with pytest.raises(ValueError, match="result must be JSON"):
        checked_json(float("nan"), "result")
    assert checked_json((1, "a"), "result") == [1, "a"]


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({"a": [1, {"b": object()}]}, "['a'][1]['b']", "'object' is not JSON"),
        ({"x": float("inf")}, "['x']", "inf is not a finite number"),
        ({"rows": [1.0, float("nan")]}, "['rows'][1]", "nan is not a finite number"),
        ({1: "one"}, "", "a key that is not a string (1)"),
        ({"s": {1, 2}}, "['s']", "'set' is not JSON"),
        ({"t": "bad \udc80"}, "['t']", "not valid Unicode"),
    ],
)
def test_first_unstorable_names_the_path_and_the_cause(
    value: Any, path: str, problem: str
) -> None:
    found = json_values.first_unstorable(value)
    assert found is not None
    assert found[0] == path
    assert problem in found[1]


def test_first_unstorable_of_storable_json_is_none() -> None:
    assert json_values.first_unstorable({"a": [1, 2.5, "x", None, True, {"b": []}]}) is None


def test_nesting_deeper_than_the_limit_is_refused_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert json_values.nesting_problem(deep) is not None
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        json_values.checked_json({"x": deep}, "inputs")
    shallow: Any = []
    for _ in range(json_values.MAX_NESTING - 1):
        shallow = [shallow]
    assert json_values.nesting_problem(shallow) is None
