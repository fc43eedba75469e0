"""Every number and every text of a definition is checked before anything is stored:
an error naming the field, never a value the database refuses later."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from flowforge import load_definition
from flowforge.errors import InvalidWorkflowDefinitionError


def definition(**fields: Any) -> dict[str, Any]:
    task = {"key": "a", "type": "a", **fields.pop("task", {})}
    return {"name": "w", "tasks": [task], **fields}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (definition(lease_seconds=1e300), "lease_seconds"),
        (definition(lease_seconds=8 * 24 * 3600.0), "lease_seconds"),
        (definition(task={"lease_seconds": 1e300}), "tasks[0].lease_seconds"),
        (definition(retry={"max_attempts": 2**31}), "retry.max_attempts"),
        (definition(retry={"max_attempts": 2**63}), "retry.max_attempts"),
        (definition(task={"retry": {"max_attempts": 2**70}}), "tasks[0].retry.max_attempts"),
        (definition(retry={"backoff_seconds": 1e300}), "retry.backoff_seconds"),
        (definition(retry={"backoff_multiplier": 1e300}), "retry.backoff_multiplier"),
        (definition(retry={"backoff_cap_seconds": 1e300}), "retry.backoff_cap_seconds"),
    ],
)
def test_a_number_past_its_bound_is_refused_naming_its_field(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidWorkflowDefinitionError, match=rf"^{re.escape(field)}: "):
        load_definition(data)


def test_the_largest_allowed_values_are_accepted() -> None:
    loaded = load_definition(
        definition(lease_seconds=7 * 24 * 3600.0, retry={"max_attempts": 2**31 - 1})
    )
    assert loaded.retry.max_attempts == 2**31 - 1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (definition(description="bad \udcff text"), "description"),
        (definition(task={"depends_on": ["\ud800"]}), "tasks[0].depends_on[0]"),
        ({"name": "w\udcff", "tasks": [{"key": "a", "type": "a"}]}, "name"),
        (definition(task={"key": "a\udcff"}), "tasks[0].key"),
        (definition(task={"type": "t\udcff"}), "tasks[0].type"),
    ],
)
def test_text_that_is_not_valid_unicode_is_refused_naming_its_field(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidWorkflowDefinitionError) as raised:
        load_definition(data)
    assert str(raised.value).startswith(f"{field}: ")


def test_a_json_file_with_a_lone_surrogate_escape_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(definition(description="x")).replace('"x"', '"\\udcff"'))
    with pytest.raises(InvalidWorkflowDefinitionError, match="description: not valid Unicode"):
        load_definition(path)
