"""The projected tables' schema: numbered migrations, applied once each, in order, and
only when asked.

A schema change is a new ``migration_NNN`` block in ``sql/common.sql`` (with dialect
macros where the types differ) and a new entry in :data:`MIGRATIONS`; a table is never
dropped to change it. :func:`migrate` (``flowforge db init`` / ``db migrate``, the
embedded default, the demo) applies what is missing; it is idempotent and safe to call
from several processes at once (PostgreSQL serialises them on an advisory lock; SQLite
on its write lock). :func:`check` (every other start) only reads the version: it refuses
a database that is behind (naming the command that migrates it) or ahead of this code.
"""

from __future__ import annotations

from flowforge import errors
from flowforge.projections.database import Database, Transaction

#: The migrations in order; the schema version is the length of this tuple.
MIGRATIONS: tuple[str, ...] = ("migration_001",)
SCHEMA_VERSION = len(MIGRATIONS)
#: What a user runs to create or migrate the schema.
MIGRATE_COMMAND = "flowforge db migrate"


def migrate(database: Database, *, target: int = SCHEMA_VERSION) -> int:
    """Apply every migration the database lacks, up to ``target``; the resulting
    version. ``target`` below the latest is for the migration tests only."""
    tx: Transaction
    with database.transaction() as tx:
        tx.run_script("create_schema_table")
        tx.run("lock_schema")
        current = schema_version(tx)
        _refuse_newer(database, current)
        for number, migration in enumerate(MIGRATIONS[current:target], start=current + 1):
            tx.run_script(migration)
            tx.run("record_schema_version", {"version": number})
    return max(current, target)


#: The name the schema had before migrations were explicit.
ensure_schema = migrate


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
