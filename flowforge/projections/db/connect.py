"""FlowForge's backend over the recorder's datastore, and the direct connections made
beside the pool: the schema creation lock, and the check that names what is missing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from flowforge import errors
from flowforge.projections.db.errors import translate_errors
from flowforge.projections.db.factory import LIBPQ_OPTIONS
from flowforge.projections.db.location import DatabaseLocation
from flowforge.projections.db.postgres import PostgresDatabase
from flowforge.projections.db.protocols import Database
from flowforge.projections.db.sqlite import SqliteDatabase

#: The advisory lock that serialises schema creation across processes (any constant).
SCHEMA_LOCK_KEY = 7354219861
#: How long a process waits between tries for the schema lock that another one holds.
SCHEMA_LOCK_POLL_S = 0.05


@contextmanager
def schema_creation_lock(location: DatabaseLocation) -> Iterator[None]:
    """Hold PostgreSQL's advisory lock while this process creates or checks the schema.

    The library's table creation (``CREATE TABLE IF NOT EXISTS``, ``CREATE TYPE``, ...)
    is not safe against itself: processes starting at once can fail with "tuple
    concurrently updated". On SQLite the database's write lock already serialises it.

    The lock is a transaction's (``pg_advisory_xact_lock``), held by keeping that
    transaction open, and it is tried, not waited for. Both are for PgBouncer in
    transaction pooling mode: a session's lock and its unlock would run in different
    server sessions (the lock would outlive the process), and a process blocked waiting
    for the lock would hold one of the pooler's few server connections while the holder
    needs another to create the tables: with as many processes starting as there are
    server connections, none would progress.
    """
    if location.dialect != "postgres":
        yield
        return
    with translate_errors(location.display), _connect(location.env) as conn:
        while True:
            with conn.transaction(force_rollback=True):
                if _try_schema_lock(conn):
                    yield
                    return
            time.sleep(SCHEMA_LOCK_POLL_S)


def _connect(env: dict[str, str]) -> psycopg.Connection[Any]:
    return psycopg.connect(
        env[LIBPQ_OPTIONS],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        dbname=env["POSTGRES_DBNAME"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"],
        connect_timeout=int(env["POSTGRES_CONNECT_TIMEOUT"]),
        autocommit=True,
        prepare_threshold=None,  # see FlowForgePostgresFactory
    )


def _try_schema_lock(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,)).fetchone()
    return bool(row and row[0])


def check_reachable(location: DatabaseLocation) -> None:
    """Connect once, directly, after the pool failed to: a server that answers but lacks
    the database or the role then says so, where the pool said only "couldn't get a
    connection after 5 s" and the advice could not name what is missing. Not done up
    front, so a process starting in a brief outage still waits out the pool's timeout."""
    if location.dialect == "postgres":
        with translate_errors(location.display), _connect(location.env):
            pass


def make_database(
    datastore: object, location: DatabaseLocation, listen_url: str | None = None
) -> Database:
    """FlowForge's backend over the recorder's datastore (one pool for both)."""
    if isinstance(datastore, PostgresDatastore):
        return PostgresDatabase(datastore, location.display, listen_url)
    if isinstance(datastore, SQLiteDatastore):
        return SqliteDatabase(datastore, location.display)
    raise errors.ConfigurationError(f"unsupported event store datastore {type(datastore)}")
