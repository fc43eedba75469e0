"""Workflow definitions from TOML and JSON files: every failure names the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowforge.app.definition_files import load_definition
from flowforge.errors import InvalidWorkflowDefinitionError
from tests.unit.aggregates.test_definition import task, workflow

ETL_TOML = """\
name = "etl"
lease_seconds = 30
[retry]
max_attempts = 3
[[tasks]]
key = "extract"
type = "extract"
[[tasks]]
key = "load"
type = "load"
depends_on = ["extract"]
lease_seconds = 120
[tasks.retry]
max_attempts = 5
"""


def problems(source: Any) -> list[str]:
    """The lines of the error ``load_definition`` raises for ``source``."""
    with pytest.raises(InvalidWorkflowDefinitionError) as caught:
        load_definition(source)
    return str(caught.value).splitlines()


def test_a_definition_passes_through_load_definition_unchanged() -> None:
    definition = load_definition(workflow(task("a")))
    assert load_definition(definition) is definition


def test_the_issues_toml_shape_loads(tmp_path: Path) -> None:
    path = tmp_path / "etl.toml"
    path.write_text(ETL_TOML)
    definition = load_definition(path)
    assert definition.name == "etl"
    assert definition.topological_order() == ("extract", "load")
    assert definition.retry_policy_for("extract").max_attempts == 3
    assert definition.retry_policy_for("load").max_attempts == 5
    assert definition.lease_seconds_for("load") == 120


def test_a_json_file_loads_from_a_string_path(tmp_path: Path) -> None:
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(workflow(task("a"), task("b", "a"))))
    assert load_definition(str(path)).dependents("a") == ("b",)


def test_a_bad_toml_definition_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(ETL_TOML.replace('depends_on = ["extract"]', 'depends_on = ["c"]'))
    assert problems(path) == [
        f"{path}: tasks[1].depends_on: unknown dependency 'c' of task 'load' "
        "(known: extract, load)"
    ]


def test_a_bad_json_definition_names_the_file_and_each_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    bad = workflow({"key": "a", "type": "work", "dependson": []}, retry={"jitter": 3})
    path.write_text(json.dumps(bad))
    lines = problems(path)
    assert lines[0] == (
        f"{path}: tasks[0].dependson: unknown key 'dependson'; did you mean 'depends_on'?"
    )
    assert lines[1].startswith(f"{path}: retry.jitter: ")
    assert len(lines) == 2


@pytest.mark.parametrize(
    ("name", "text", "language", "line_number"),
    [
        ("broken.toml", 'name = "etl"\n[[tasks]\n', "TOML", 2),
        ("broken.json", '{\n  "name": "etl",\n  "tasks": [,]\n}', "JSON", 3),
    ],
)
def test_an_unparsable_file_is_reported_with_the_file_and_line(
    tmp_path: Path, name: str, text: str, language: str, line_number: int
) -> None:
    path = tmp_path / name
    path.write_text(text)
    (line,) = problems(path)
    assert line.startswith(f"{path}: invalid {language}: ")
    assert f"line {line_number}" in line


def test_a_json_file_whose_top_level_is_not_an_object_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[]")
    assert problems(path) == [f"{path}: the top level must be a JSON object, got list"]


def test_a_missing_file_is_reported_by_name(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    assert problems(path) == [f"{path}: no such file"]


def test_an_unreadable_file_is_reported_by_name(tmp_path: Path) -> None:
    path = tmp_path / "a_directory.json"
    path.mkdir()
    (line,) = problems(path)
    assert line.startswith(f"{path}: cannot read the file: ")


def test_a_file_that_is_not_utf8_is_reported_by_name(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "caf\u00e9"'.encode("latin-1"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: not UTF-8 text")


@pytest.mark.parametrize("name", ["wf.yaml", "wf"])
def test_an_unsupported_file_type_is_rejected_naming_its_suffix(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("name: wf")
    (line,) = problems(path)
    assert line.startswith(f"{path}: unsupported file type ")
    assert (path.suffix or "(no suffix)") in line


def test_load_definition_rejects_a_source_of_the_wrong_kind() -> None:
    (line,) = problems(42)
    assert line.endswith("got int")
