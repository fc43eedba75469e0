"""The projected tables' schema: a file plus numbered migrations, applied only when asked.

``sql/schema.sql`` is the current schema; ``sql/migrations/NNN_<what>.sql`` are the steps
from each older version (procrastinate's layout). A fresh database gets ``schema.sql`` in
one step, with every migration recorded as applied; an older one gets the migrations it
lacks, in order. A schema change edits ``schema.sql`` and adds the next migration; a
table is never dropped to change it, and ``tests/integration/projections/
test_migrations.py`` proves that a migrated database equals a fresh one.

:func:`migrate` (``flowforge db init`` / ``db migrate``, the embedded default, the demo)
is idempotent and safe from several processes at once (PostgreSQL serialises them on an
advisory lock; SQLite on its write lock). :func:`check` (every other start) only reads
the version: it refuses a database that is behind (naming the command that migrates it)
or ahead of this code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from flowforge import errors
from flowforge.projections import migration_files, statements
from flowforge.projections.db.protocols import Database, Transaction

#: The migrations in order (``sql/migrations/``); the schema version is their count.
MIGRATIONS: tuple[str, ...] = statements.migration_names()
SCHEMA_VERSION = migration_files.SCHEMA_VERSION
#: What a user runs to create or migrate the schema.
MIGRATE_COMMAND = "flowforge db migrate"


def migrate(database: Database) -> int:
    """Bring the database to this code's schema version; the version.

    A fresh database gets ``schema.sql``; an older one the migrations it lacks.
    """
    with _schema_transaction(database) as (tx, current):
        if current == 0:
            tx.run_script("schema")
        else:
            _apply_migrations(tx, current, SCHEMA_VERSION)
        _record(tx, current, SCHEMA_VERSION)
    return SCHEMA_VERSION


def migrate_to(database: Database, version: int) -> int:
    """Build ``version`` from the migrations alone, as an older FlowForge left its
    database (for the migration tests; production migrates to the latest)."""
    with _schema_transaction(database) as (tx, current):
        _apply_migrations(tx, current, version)
        _record(tx, current, version)
    return max(current, version)


@contextmanager
def _schema_transaction(database: Database) -> Iterator[tuple[Transaction, int]]:
    """The schema table, its lock, and the current version, in one transaction."""
    tx: Transaction
    with database.transaction() as tx:
        tx.run_script("create_schema_table")
        tx.run("lock_schema")
        current = schema_version(tx)
        _refuse_newer(database, current)
        yield tx, current


def _apply_migrations(tx: Transaction, current: int, target: int) -> None:
    for migration in MIGRATIONS[current:target]:
        tx.run_script(migration)


def _record(tx: Transaction, current: int, target: int) -> None:
    for number in range(current + 1, target + 1):
        tx.run("record_schema_version", {"version": number})


def check(database: Database) -> int:
    """The database's schema version, if it is this code's; refuse any other."""
    tx: Transaction
    with database.read() as tx:
        exists = bool(tx.run("schema_table_exists"))
        current = schema_version(tx) if exists else 0
    _refuse_newer(database, current)
    if current < SCHEMA_VERSION:
        state = f"schema version {current}" if current else "no FlowForge schema"
        raise errors.SchemaMigrationRequiredError(
            f"the database at {database.location} has {state}, but this FlowForge needs "
            f"version {SCHEMA_VERSION}: run `{MIGRATE_COMMAND}` (with the same "
            f"--database-url) to create or migrate it, then retry"
        )
    return current


def schema_version(tx: Transaction) -> int:
    (row,) = tx.run("select_schema_version")
    return int(row["version"])


def _refuse_newer(database: Database, current: int) -> None:
    if current > SCHEMA_VERSION:
        raise errors.SchemaVersionError(
            f"the database at {database.location} has schema version {current}, but "
            f"this FlowForge knows only up to {SCHEMA_VERSION}: it was created by a "
            f"newer FlowForge. Upgrade FlowForge (or point it at another database); "
            f"refusing to start rather than risk writing rows the newer version "
            f"does not expect."
        )
