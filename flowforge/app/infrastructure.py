"""From a database URL to the ``eventsourcing`` recorder and FlowForge's database backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from flowforge import errors
from flowforge.projections.database import (
    Database,
    PostgresDatabase,
    SqliteDatabase,
    translate_errors,
)

#: Connections each process keeps open, and how many more it may open under load.
POSTGRES_POOL_SIZE = 4
POSTGRES_MAX_OVERFLOW = 16


@dataclass(frozen=True, slots=True)
class DatabaseLocation:
    """Where the event store and the tables live, parsed from a URL."""

    url: str
    dialect: str
    env: dict[str, str]
    display: str

    def eventsourcing_env(self, *, create_tables: bool) -> dict[str, str]:
        """The library's settings; it creates its event table only when migrating."""
        return {**self.env, "CREATE_TABLE": "y" if create_tables else "n"}

    def require_directory(self) -> None:
        """Refuse to create a SQLite database in a directory that does not exist."""
        directory = Path(self.display).parent
        if self.dialect == "sqlite" and not directory.exists():
            raise errors.ConfigurationError(
                f"database URL {self.url!r}: the directory {directory} does not exist; create it"
            )

    def require_existing_file(self) -> None:
        """Refuse to open a SQLite database that does not exist: opening would create
        an empty file, and only a migrating command should create one."""
        if self.dialect == "sqlite" and not Path(self.display).exists():
            raise errors.DatabaseMissingError(
                f"there is no SQLite database at {self.display}; create it with "
                f"`flowforge db init --database-url {self.url}` (or run a workflow with "
                f"`flowforge run`, which creates it)"
            )


def parse_database_url(url: str) -> DatabaseLocation:
    """``postgresql://user[:password]@host[:port]/dbname`` or ``sqlite:///path``."""
    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres"):
        return _postgres(
            url, parts.hostname, parts.port, parts.username, parts.password, parts.path
        )
    if parts.scheme == "sqlite":
        return _sqlite(url, parts.netloc, parts.path)
    raise errors.ConfigurationError(
        f"database URL {_redact(url)!r} has scheme {parts.scheme!r}; use "
        f"postgresql://user@host:5432/dbname or sqlite:///path/to/flowforge.db"
    )


def _postgres(
    url: str,
    host: str | None,
    port: int | None,
    user: str | None,
    password: str | None,
    path: str,
) -> DatabaseLocation:
    dbname = unquote(path.lstrip("/"))
    if not host or not dbname:
        raise errors.ConfigurationError(
            f"database URL {_redact(url)!r} needs a host and a database name, e.g. "
            f"postgresql://postgres@127.0.0.1:5432/flowforge"
        )
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": host,
        "POSTGRES_PORT": str(port or 5432),
        "POSTGRES_USER": unquote(user or "postgres"),
        "POSTGRES_PASSWORD": unquote(password or ""),
        "POSTGRES_POOL_SIZE": str(POSTGRES_POOL_SIZE),
        "POSTGRES_MAX_OVERFLOW": str(POSTGRES_MAX_OVERFLOW),
        # A connection killed under us (restart, pg_terminate_backend) is replaced on
        # the next checkout instead of failing the next command.
        "POSTGRES_PRE_PING": "y",
        "POSTGRES_CONNECT_TIMEOUT": "5",
        # The publisher holds its sweep's transaction open while the broker confirms
        # (up to 30 s); the library's default would kill that connection after 5 s.
        "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "120",
    }
    return DatabaseLocation(url, "postgres", env, f"{host}:{port or 5432}/{dbname}")


def _sqlite(url: str, netloc: str, path: str) -> DatabaseLocation:
    if netloc or not path or path == "/":
        raise errors.ConfigurationError(
            f"database URL {url!r} is not a SQLite file URL; use sqlite:///relative/path.db"
            f" or sqlite:////absolute/path.db"
        )
    file = Path(unquote(path[1:]))
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(file),
        "SQLITE_LOCK_TIMEOUT": "30",
    }
    return DatabaseLocation(url, "sqlite", env, str(file))


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


#: The advisory lock that serialises schema creation across processes (any constant).
SCHEMA_LOCK_KEY = 7354219861


@contextmanager
def schema_creation_lock(location: DatabaseLocation) -> Iterator[None]:
    """Hold PostgreSQL's advisory lock while this process creates or checks the schema.

    The library's table creation (``CREATE TABLE IF NOT EXISTS``, ``CREATE TYPE``, ...)
    is not safe against itself: processes starting at once can fail with "tuple
    concurrently updated". On SQLite the database's write lock already serialises it.
    """
    if location.dialect != "postgres":
        yield
        return
    env = location.env
    with (
        translate_errors(location.display),
        psycopg.connect(
            host=env["POSTGRES_HOST"],
            port=env["POSTGRES_PORT"],
            dbname=env["POSTGRES_DBNAME"],
            user=env["POSTGRES_USER"],
            password=env["POSTGRES_PASSWORD"],
            connect_timeout=int(env["POSTGRES_CONNECT_TIMEOUT"]),
            autocommit=True,
        ) as conn,
    ):
        conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK_KEY,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK_KEY,))


def make_database(datastore: object, location: DatabaseLocation) -> Database:
    """FlowForge's backend over the recorder's datastore (one pool for both)."""
    if isinstance(datastore, PostgresDatastore):
        return PostgresDatabase(datastore, location.display)
    if isinstance(datastore, SQLiteDatastore):
        return SqliteDatabase(datastore, location.display)
    raise errors.ConfigurationError(f"unsupported event store datastore {type(datastore)}")
