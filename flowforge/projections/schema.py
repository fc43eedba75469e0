"""The projected tables' schema: numbered migrations, applied once each, in order.

A schema change is a new ``migration_NNN`` block in both ``sql/*.sql`` files and a new
entry in :data:`MIGRATIONS`; a table is never dropped to change it. ``ensure_schema`` is
idempotent and safe to call from several processes at once (PostgreSQL serialises them
on an advisory lock; SQLite on its write lock), and refuses a database whose schema is
newer than this FlowForge.
"""

from __future__ import annotations

from flowforge import errors
from flowforge.projections.database import Database, Transaction

#: The migrations in order; the schema version is the length of this tuple.
MIGRATIONS: tuple[str, ...] = ("migration_001", "migration_002")
SCHEMA_VERSION = len(MIGRATIONS)


def ensure_schema(database: Database) -> int:
    """Apply every migration the database lacks; return the resulting version."""
    tx: Transaction
    with database.transaction() as tx:
        tx.run_script("create_schema_table")
        tx.run("lock_schema")
        current = schema_version(tx)
        if current > SCHEMA_VERSION:
            raise errors.SchemaVersionError(
                f"the database at {database.location} has schema version {current}, but "
                f"this FlowForge knows only up to {SCHEMA_VERSION}: it was created by a "
                f"newer FlowForge. Upgrade FlowForge (or point it at another database); "
                f"refusing to start rather than risk writing rows the newer version "
                f"does not expect."
            )
        for number, migration in enumerate(MIGRATIONS[current:], start=current + 1):
            tx.run_script(migration)
            tx.run("record_schema_version", {"version": number})
    return SCHEMA_VERSION


def deployment_id(database: Database) -> str:
    """The deployment's id, written once by the migration that created it."""
    tx: Transaction
    with database.read() as tx:
        (row,) = tx.run("select_deployment")
    return str(row["deployment_id"])


def schema_version(tx: Transaction) -> int:
    (row,) = tx.run("select_schema_version")
    return int(row["version"])
