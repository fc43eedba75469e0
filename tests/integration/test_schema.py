"""The schema: idempotent, versioned, and refusing a database newer than the code."""

from __future__ import annotations

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.projections import schema


def recorded_versions(app: FlowForge) -> list[int]:
    with app.database.transaction() as tx:
        return [schema.schema_version(tx)]


def test_creating_the_schema_again_changes_nothing(app: FlowForge) -> None:
    run_id = app.start_workflow_run({"name": "keep", "tasks": [{"key": "a", "type": "t"}]})
    assert schema.ensure_schema(app.database) == schema.SCHEMA_VERSION
    assert schema.ensure_schema(app.database) == schema.SCHEMA_VERSION
    assert recorded_versions(app) == [schema.SCHEMA_VERSION]
    assert app.get_workflow_run(run_id).workflow_name == "keep"


def test_a_database_of_a_newer_schema_version_is_refused_saying_why(
    sqlite_app: FlowForge,
) -> None:
    # SQLite only: the session's PostgreSQL database is shared by the other tests.
    app = sqlite_app
    with app.database.transaction() as tx:
        tx.run("record_schema_version", {"version": schema.SCHEMA_VERSION + 1})
    with pytest.raises(errors.SchemaVersionError, match="newer FlowForge"):
        schema.ensure_schema(app.database)


def test_every_migration_has_a_block_in_both_dialects() -> None:
    from flowforge.projections import queries

    for dialect in ("postgres", "sqlite"):
        statements = queries.load(dialect)
        assert [m for m in schema.MIGRATIONS if m not in statements] == [], dialect
