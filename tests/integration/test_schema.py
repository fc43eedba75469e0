"""The schema: migrated only when asked, idempotent, versioned, and refusing a database
that is behind or ahead of the code with the command that fixes it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.projections import schema
from flowforge.projections.db.protocols import Transaction


def recorded_version(app: FlowForge) -> int:
    tx: Transaction
    with app.database.transaction() as tx:
        return schema.schema_version(tx)


def test_creating_the_schema_again_changes_nothing(app: FlowForge) -> None:
    run_id = app.start_workflow_run({"name": "keep", "tasks": [{"key": "a", "type": "t"}]})
    assert schema.migrate(app.database) == schema.SCHEMA_VERSION
    assert schema.migrate(app.database) == schema.SCHEMA_VERSION
    assert recorded_version(app) == schema.SCHEMA_VERSION
    assert app.get_workflow_run(run_id).workflow_name == "keep"
    assert schema.check(app.database) == schema.SCHEMA_VERSION


def test_a_database_of_a_newer_schema_version_is_refused_saying_why(
    sqlite_app: FlowForge, sqlite_url: str
) -> None:
    # SQLite only: the session's PostgreSQL database is shared by the other tests.
    app = sqlite_app
    tx: Transaction
    with app.database.transaction() as tx:
        tx.run("record_schema_version", {"version": schema.SCHEMA_VERSION + 1})
    with pytest.raises(errors.SchemaVersionError, match="newer FlowForge"):
        schema.migrate(app.database)
    with pytest.raises(errors.SchemaVersionError, match="newer FlowForge"):
        FlowForge(sqlite_url, migrate=False)


def test_a_database_without_the_schema_is_refused_naming_the_migrate_command(
    tmp_path: Path,
) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    with pytest.raises(errors.SchemaMigrationRequiredError) as refused:
        FlowForge(f"sqlite:///{path}", migrate=False)
    assert "no FlowForge schema" in str(refused.value)
    assert "`flowforge db migrate`" in str(refused.value)
    with closing(sqlite3.connect(path)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == []  # checking created nothing, not even the library's table


def test_an_older_schema_is_refused_until_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    FlowForge(url, migrate=True).close()
    with closing(sqlite3.connect(tmp_path / "old.db")) as conn, conn:
        conn.execute("DELETE FROM flowforge_schema WHERE version = ?", (schema.SCHEMA_VERSION,))
    with pytest.raises(errors.SchemaMigrationRequiredError, match="flowforge db migrate"):
        FlowForge(url, migrate=False)


def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(errors.DatabaseMissingError, match=str(path)):
        FlowForge(f"sqlite:///{path}", migrate=False)
    assert not path.exists()


def test_the_embedded_sqlite_default_migrates_and_postgres_only_checks(
    tmp_path: Path, postgres_url: str
) -> None:
    with FlowForge(f"sqlite:///{tmp_path / 'embedded.db'}") as embedded:
        assert embedded.schema_version == schema.SCHEMA_VERSION
    with FlowForge(postgres_url) as checked:  # the session database, migrated by conftest
        assert checked.schema_version == schema.SCHEMA_VERSION


def test_every_migration_has_a_block_in_both_dialects() -> None:
    from flowforge.projections import statements

    for dialect in statements.DIALECTS:
        loaded = statements.load(dialect)
        assert [m for m in (*schema.MIGRATIONS, "schema") if m not in loaded] == [], dialect
