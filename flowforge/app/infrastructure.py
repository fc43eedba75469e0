"""From a database URL to the ``eventsourcing`` recorder and FlowForge's database backend."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from eventsourcing.postgres import PostgresDatastore, PostgresFactory
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.utils import Environment, EnvType, get_topic
from psycopg.conninfo import conninfo_to_dict, make_conninfo

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


class FlowForgePostgresFactory(PostgresFactory):
    """The library's PostgreSQL infrastructure, with FlowForge's connection settings.

    Server-side prepared statements are on (psycopg prepares a statement once it has
    run ``PREPARE_THRESHOLD`` times on a connection): parsing and planning FlowForge's
    statements on every execution cost a third of a claim+finish cycle's machine CPU
    (docs/performance.md). They are off (``prepare_threshold=None``; the library's
    ``prepare=True`` on its reads too) when ``PREPARED_STATEMENTS`` says so: a prepared
    statement lives in one server session, and behind PgBouncer in transaction pooling
    mode (1.18, Debian 12's, does not track them) the next transaction runs in another
    session: "prepared statement _pg3_0 does not exist" (docs/architecture.md, "Through
    PgBouncer"). The URL's other libpq parameters (``LIBPQ_OPTIONS``) reach every
    connection the pool opens.
    """

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        # Before the pool opens its first connection: the library opens it lazily.
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict), "the library passes its pool a dict of kwargs"
        prepared = self.env.get(PREPARED_STATEMENTS) != "n"
        kwargs["prepare_threshold"] = PREPARE_THRESHOLD if prepared else None
        # The library's settings carry host, port, database, user and password only. The
        # rest of the URL (``target_session_attrs=read-write``, which makes every new
        # connection skip hosts that are standbys and so find the primary after a
        # failover; ``sslmode``; ...) is given to each connection the pool opens.
        self.datastore.pool.conninfo = self.env.get(LIBPQ_OPTIONS) or ""


@dataclass(frozen=True, slots=True)
class DatabaseLocation:
    """Where the event store and the tables live, parsed from a URL."""

    url: str
    dialect: str
    env: dict[str, str]
    display: str

    def eventsourcing_env(
        self, *, create_tables: bool, prepared_statements: bool = True
    ) -> dict[str, str]:
        """The library's settings; it creates its event table only when migrating."""
        return {
            **self.env,
            "CREATE_TABLE": "y" if create_tables else "n",
            PREPARED_STATEMENTS: "y" if prepared_statements else "n",
        }

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
    """``postgresql://user[:password]@host[:port][,host[:port]...]/dbname[?param=value]``
    or ``sqlite:///path``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed "[" (IPv6): one line, not a traceback
        raise errors.ConfigurationError(
            f"database URL {_redact(url)!r} is not a valid URL ({exc}); use "
            f"postgresql://user@host:5432/dbname with a port from 1 to 65535"
        ) from exc
    if parts.scheme in ("postgresql", "postgres"):
        return _postgres(url)
    if parts.scheme == "sqlite":
        return _sqlite(url, parts.netloc, parts.path)
    raise errors.ConfigurationError(
        f"database URL {_redact(url)!r} has scheme {parts.scheme!r}; use "
        f"postgresql://user@host:5432/dbname or sqlite:///path/to/flowforge.db"
    )


#: The eventsourcing setting (environment key) under which the URL's other libpq
#: parameters travel to :class:`FlowForgePostgresFactory`, as a conninfo string.
LIBPQ_OPTIONS = "FLOWFORGE_LIBPQ_OPTIONS"
#: The eventsourcing setting that turns server-side prepared statements off ("n").
PREPARED_STATEMENTS = "FLOWFORGE_PREPARED_STATEMENTS_OPTION"
#: Executions of a statement on one connection before psycopg prepares it (its default).
PREPARE_THRESHOLD = 5
#: The URL's parts that eventsourcing's own settings carry; everything else is an option.
_LIBPQ_SETTINGS = ("host", "port", "dbname", "user", "password")


def _postgres(url: str) -> DatabaseLocation:
    # libpq's own parser: it knows the multi-host form (h1:p1,h2:p2) that urlsplit cannot
    # read, percent-decoding, and which query parameters exist.
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise errors.ConfigurationError(
            f"database URL {_redact(url)!r} is not a PostgreSQL URL libpq accepts "
            f"({str(exc).strip()}); use postgresql://user@host:5432/dbname, or "
            f"postgresql://user@host1:5432,host2:5432/dbname?target_session_attrs=read-write"
        ) from exc
    dbname, hosts = params.get("dbname"), str(params.get("host") or "").split(",")
    if not dbname or not all(hosts):
        raise errors.ConfigurationError(
            f"database URL {_redact(url)!r} needs a host (or several, comma-separated) and a "
            f"database name, e.g. postgresql://postgres@127.0.0.1:5432/flowforge"
        )
    ports = _ports(url, str(params.get("port") or ""), len(hosts))
    options = {k: str(v) for k, v in params.items() if k not in _LIBPQ_SETTINGS}
    # Per host, so that a host that does not answer (a dead primary's address) is given
    # up in seconds and the next one tried; libpq's default waits for TCP to time out.
    options.setdefault("connect_timeout", "5")
    env = {
        "PERSISTENCE_MODULE": get_topic(FlowForgePostgresFactory),
        "POSTGRES_DBNAME": str(dbname),
        "POSTGRES_HOST": ",".join(hosts),
        "POSTGRES_PORT": ",".join(ports),
        "POSTGRES_USER": str(params.get("user") or "postgres"),
        "POSTGRES_PASSWORD": str(params.get("password") or ""),
        LIBPQ_OPTIONS: make_conninfo("", **options),
        "POSTGRES_POOL_SIZE": str(POSTGRES_POOL_SIZE),
        "POSTGRES_MAX_OVERFLOW": str(POSTGRES_MAX_OVERFLOW),
        # No ping on checkout: a connection killed under us (restart,
        # pg_terminate_backend) is found at BEGIN and replaced there, and the BEGIN retried
        # (flowforge.projections.database.PostgresDatabase._begin).
        "POSTGRES_PRE_PING": "n",
        "POSTGRES_CONNECT_TIMEOUT": "5",
        # The publisher holds its sweep's transaction open while the broker confirms
        # (up to 30 s); the library's default would kill that connection after 5 s.
        "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "120",
    }
    servers = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    return DatabaseLocation(url, "postgres", env, f"{servers}/{dbname}")


def _ports(url: str, port: str, hosts: int) -> list[str]:
    """One port per host: as given, or the one port for every host (libpq's rule)."""
    ports = [p or "5432" for p in port.split(",")]
    if len(ports) == 1:
        ports *= hosts
    bad = [p for p in ports if not (p.isdigit() and 1 <= int(p) <= 65535)]
    if bad or len(ports) != hosts:
        raise errors.ConfigurationError(
            f"database URL {_redact(url)!r} has port {port!r} for {hosts} host(s); give each "
            f"host a port from 1 to 65535 (host1:5432,host2:5433), or none for 5432"
        )
    return ports


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


#: ``scheme://user:password@``: the password, found without parsing the URL, which may be
#: the very thing that is malformed.
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def _redact(url: str) -> str:
    return _PASSWORD.sub(r"\1***@", url)


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


def parse_listen_url(url: str, database: DatabaseLocation) -> str:
    """The URL the wake-up listener connects to: PostgreSQL, beside a PostgreSQL database."""
    listen = parse_database_url(url)
    if database.dialect != "postgres" or listen.dialect != "postgres":
        raise errors.ConfigurationError(
            f"listen database URL {_redact(url)!r} is for PostgreSQL's LISTEN beside a "
            f"PostgreSQL database URL (e.g. the server itself when the database URL goes "
            f"through PgBouncer); the database URL here is {database.dialect}: unset it"
        )
    return listen.url


def make_database(
    datastore: object, location: DatabaseLocation, listen_url: str | None = None
) -> Database:
    """FlowForge's backend over the recorder's datastore (one pool for both)."""
    if isinstance(datastore, PostgresDatastore):
        return PostgresDatabase(datastore, location.display, listen_url)
    if isinstance(datastore, SQLiteDatastore):
        return SqliteDatabase(datastore, location.display)
    raise errors.ConfigurationError(f"unsupported event store datastore {type(datastore)}")
