"""The row types: their columns derive from the aggregates' field declarations (pure)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from flowforge.aggregates import task_run
from flowforge.projections import tables


def test_each_table_has_its_aggregates_fields_and_the_bookkeeping_columns() -> None:
    expected = ("id", *task_run.STATIC_FIELDS, *task_run.MUTABLE_FIELDS)
    assert (*expected, "version", "created_at", "updated_at") == tables.TASK_RUN_COLUMNS
    assert set(tables.WORKFLOW_RUN_COLUMNS) == {
        f.name for f in dataclasses.fields(tables.WorkflowRunRow)
    }


def test_a_row_type_that_misses_a_declared_column_is_refused() -> None:
    @dataclasses.dataclass
    class Short(tables._Row):
        id: int

    with pytest.raises(TypeError, match=r"missing \['state'\]"):
        tables.check_columns(Short, ("id", "state"))


def test_a_row_type_with_an_undeclared_column_is_refused() -> None:
    @dataclasses.dataclass
    class Long(tables._Row):
        id: int
        colour: str

    with pytest.raises(TypeError, match=r"not declared \['colour'\]"):
        tables.check_columns(Long, ("id",))


def test_values_are_the_columns_by_name_without_copying() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    definition = {"name": "w", "tasks": []}
    row = tables.WorkflowRunRow(
        uuid4(), "w", definition, {}, None, "pending", None, None, 1, at, at
    )
    values = row.values()
    assert set(values) == set(tables.WORKFLOW_RUN_COLUMNS)
    assert values["definition"] is definition
    assert tables.WorkflowRunRow.from_mapping(values) == row
