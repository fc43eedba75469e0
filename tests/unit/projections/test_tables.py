"""The row types: their columns derive from the aggregates' field declarations (pure)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from flowforge.projections import tables

#: The tables' columns, as the rows carry them (schema.sql declares them, migrations
#: added lease_seconds, the rerun columns, the timeout columns, max_running, then the
#: lost workers' (max_worker_losses, worker_losses), then a mapped task's elements'
#: (map_index, map_item); the rows carry the fixed fields first): a field added to or dropped
#: from an aggregate's declaration changes a table, which must be a deliberate change
#: here, in schema.sql and in a migration, not a side effect.
TASK_RUN_COLUMNS = (
    *("id", "workflow_run_id", "task_key", "task_type", "depends_on", "max_attempts"),
    *("lease_seconds", "timeout_seconds", "max_running", "max_worker_losses"),
    *("map_index", "map_item", "state"),
    "fencing_token",
    *("attempt", "lease_owner", "lease_expires_at", "deadline_at", "started_at"),
    *("finished_at", "retry_due_at", "result", "error"),
    *("carried_from_run_id", "carried_from_task_run_id", "carried_from_attempt"),
    *("worker_losses", "version", "created_at", "updated_at"),
)
WORKFLOW_RUN_COLUMNS = (
    *("id", "workflow_name", "definition", "inputs", "idempotency_key", "rerun_of"),
    *("start_at", "trace_context", "state"),
    *("started_at", "finished_at", "version", "created_at", "updated_at"),
)


def test_each_table_has_the_documented_columns_in_order() -> None:
    assert tables.TASK_RUN_COLUMNS == TASK_RUN_COLUMNS
    assert tables.WORKFLOW_RUN_COLUMNS == WORKFLOW_RUN_COLUMNS


def test_each_row_type_has_exactly_its_tables_columns() -> None:
    for row_type, columns in [
        (tables.TaskRunRow, TASK_RUN_COLUMNS),
        (tables.WorkflowRunRow, WORKFLOW_RUN_COLUMNS),
    ]:
        assert tuple(f.name for f in dataclasses.fields(row_type)) == columns


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
        uuid4(), "w", definition, {}, None, None, None, None, "pending", None, None, 1, at, at
    )
    values = row.values()
    assert set(values) == set(tables.WORKFLOW_RUN_COLUMNS)
    assert values["definition"] is definition
    assert tables.WorkflowRunRow.from_mapping(values) == row
