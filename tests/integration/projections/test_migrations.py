"""A migrated database equals a fresh one, on both backends (procrastinate's test).

For every schema version a database may be at (the oldest is 1), create it at that
version with rows in it, migrate it to the latest, and compare its catalog (tables,
columns, types, nullability, defaults, constraints, indexes) with a freshly initialised
database's. A migration that forgets what a fresh schema has, or adds what it lacks,
fails here.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from flowforge.app.definition_files import load_definition
from flowforge.app.event_store import EventStore
from flowforge.app.service import FlowForge
from flowforge.projections import event_log, schema
from flowforge.projections.db.connect import make_database
from flowforge.projections.db.location import parse_database_url
from tests import servers

VERSIONS = range(1, schema.SCHEMA_VERSION + 1)

#: The PostgreSQL catalog, one query per kind of object, each row a plain tuple.
POSTGRES_CATALOG = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default
        FROM information_schema.columns WHERE table_schema = 'public'
        ORDER BY table_name, column_name""",
    "constraints": """
        SELECT cls.relname, con.conname, pg_get_constraintdef(con.oid)
        FROM pg_constraint con JOIN pg_class cls ON cls.oid = con.conrelid
        JOIN pg_namespace ns ON ns.oid = cls.relnamespace
        WHERE ns.nspname = 'public' ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'public' ORDER BY 1, 2""",
    "functions": """
        SELECT proc.proname, pg_get_functiondef(proc.oid)
        FROM pg_proc proc JOIN pg_namespace ns ON ns.oid = proc.pronamespace
        WHERE ns.nspname = 'public' ORDER BY 1""",
}


def open_at_version(url: str, version: int) -> None:
    """A database created at schema ``version`` (what an older FlowForge left)."""
    location = parse_database_url(url)
    events = EventStore(env=location.eventsourcing_env(create_tables=True))
    try:
        database = make_database(event_log.datastore_of(events.recorder), location)
        assert schema.migrate_to(database, version) == version
    finally:
        events.close()


def with_rows(url: str) -> None:
    """A run in the database, so a migration runs over data, as it does in production."""
    with FlowForge(url, migrate=False) as app:
        app.start_workflow_run({"name": "old", "tasks": [{"key": "a", "type": "t"}]})


# --- PostgreSQL ------------------------------------------------------------------------


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(
        f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:"
        f"{servers.POSTGRES_PORT}/{servers.POSTGRES_ADMIN_DB}",
        autocommit=True,
    )


@pytest.fixture
def postgres_urls() -> Iterator[tuple[str, str]]:
    """Two empty databases of this test's own: one to migrate, one to create fresh."""
    servers.require_postgres()
    names = [f"flowforge_migrate_{os.getpid()}_{kind}" for kind in ("old", "fresh")]
    with _admin() as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    base = f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:{servers.POSTGRES_PORT}"
    yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    with _admin() as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {kind: conn.execute(query).fetchall() for kind, query in POSTGRES_CATALOG.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_migrated_postgres_database_equals_a_fresh_one(
    postgres_urls: tuple[str, str], version: int
) -> None:
    old, fresh = postgres_urls
    open_at_version(old, version)
    if version == schema.SCHEMA_VERSION:
        with_rows(old)
    FlowForge(old, migrate=True).close()
    FlowForge(fresh, migrate=True).close()
    migrated, created = postgres_catalog(old), postgres_catalog(fresh)
    assert migrated["columns"], "the catalog query found no tables"
    assert migrated == created


# --- SQLite ------------------------------------------------------------------------------


#: A named constraint in a CREATE TABLE: SQLite keeps CHECKs only in the statement text.
NAMED_CONSTRAINT = re.compile(r"CONSTRAINT (\w+) (CHECK|UNIQUE) \(", re.IGNORECASE)


def named_constraints(table: str, sql: str) -> list[tuple[str, str, str]]:
    """``(table, name, definition)`` of each named constraint, whitespace normalised."""
    found = []
    for match in NAMED_CONSTRAINT.finditer(sql):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        found.append((table, match.group(1), " ".join(sql[match.start(2) : end].split())))
    return found


def sqlite_catalog(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The catalog by name, not by position or formatting: ``ALTER TABLE ... ADD COLUMN``
    appends to the stored CREATE TABLE text, so a migrated table's text differs from a
    fresh one's even when the tables are the same."""
    with closing(sqlite3.connect(path)) as conn:
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        columns = sorted(
            (table, name, kind, notnull, default, pk)
            for table in tables
            for _, name, kind, notnull, default, pk in conn.execute(
                f'PRAGMA table_info("{table}")'
            )
        )
        foreign_keys = sorted(
            (table, *key[2:5])
            for table in tables
            for key in conn.execute(f'PRAGMA foreign_key_list("{table}")')
        )
        indexes = sorted(
            (table, name, " ".join((sql or "").split()))
            for name, table, sql in conn.execute(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'"
            )
        )
        constraints = sorted(
            named
            for table, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
            )
            for named in named_constraints(table, sql)
        )
    return {
        "tables": sorted((t,) for t in tables),
        "columns": columns,
        "foreign_keys": foreign_keys,
        "indexes": indexes,
        "constraints": constraints,
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_a_migrated_sqlite_database_equals_a_fresh_one(tmp_path: Path, version: int) -> None:
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    open_at_version(f"sqlite:///{old}", version)
    if version == schema.SCHEMA_VERSION:
        with_rows(f"sqlite:///{old}")
    FlowForge(f"sqlite:///{old}", migrate=True).close()
    FlowForge(f"sqlite:///{fresh}", migrate=True).close()
    migrated, created = sqlite_catalog(old), sqlite_catalog(fresh)
    assert migrated["columns"], "the catalog query found no tables"
    assert migrated == created


def test_a_fresh_database_records_every_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    FlowForge(f"sqlite:///{path}", migrate=True).close()
    FlowForge(f"sqlite:///{path}", migrate=True).close()
    with closing(sqlite3.connect(path)) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM flowforge_schema")]
    assert versions == list(VERSIONS)


# --- data a migration fills in ------------------------------------------------------------

#: A run's definition as FlowForge stores it, with a task lease and a workflow lease.
LEASED = load_definition(
    {
        "name": "leased",
        "lease_seconds": 40,
        "tasks": [
            {"key": "own", "type": "t", "lease_seconds": 12.5},
            {"key": "inherits", "type": "t"},
        ],
    }
).to_dict()
#: Rows as schema version 4 had them (no task lease), in SQL both databases take.
VERSION_4_ROWS = (
    "INSERT INTO workflow_runs (id, workflow_name, definition, inputs, state, version,"
    " created_at, updated_at) VALUES ('{run}', 'leased', '{definition}', '{{}}', 'running',"
    " 2, {at}, {at})",
    *(
        "INSERT INTO task_runs (id, workflow_run_id, task_key, task_type, depends_on,"
        " max_attempts, state, fencing_token, attempt, version, created_at, updated_at)"
        f" VALUES ('{{{key}}}', '{{run}}', '{key}', 't', '[]', 1, 'ready', 0, 1, 1,"
        " {at}, {at})"
        for key in ("own", "inherits")
    ),
)


def fill_at_version_4(execute: Any, at: str) -> None:
    ids = {"run": str(uuid4()), "own": str(uuid4()), "inherits": str(uuid4())}
    for statement in VERSION_4_ROWS:
        execute(statement.format(**ids, definition=json.dumps(LEASED), at=at))


def test_migration_5_gives_older_postgres_task_rows_their_definitions_lease(
    postgres_urls: tuple[str, str],
) -> None:
    old, _ = postgres_urls
    open_at_version(old, 4)
    with psycopg.connect(old, autocommit=True) as conn:
        fill_at_version_4(conn.execute, "now()")
    FlowForge(old, migrate=True).close()
    with psycopg.connect(old) as conn:
        rows = conn.execute("SELECT task_key, lease_seconds FROM task_runs").fetchall()
    leases: dict[str, float] = dict(rows)
    assert leases == {"own": 12.5, "inherits": 40.0}


def test_migration_5_gives_older_sqlite_task_rows_their_definitions_lease(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    open_at_version(f"sqlite:///{path}", 4)
    with closing(sqlite3.connect(path)) as conn, conn:
        fill_at_version_4(conn.execute, "0")
    FlowForge(f"sqlite:///{path}", migrate=True).close()
    with closing(sqlite3.connect(path)) as conn:
        leases = dict(conn.execute("SELECT task_key, lease_seconds FROM task_runs").fetchall())
    assert leases == {"own": 12.5, "inherits": 40.0}
