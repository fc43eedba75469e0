"""From a database URL to where FlowForge's data lives: the dialect, the ``eventsourcing``
library's settings, and the address shown in messages (its password never shown)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from eventsourcing.utils import get_topic
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from flowforge import errors
from flowforge.projections.db.factory import (
    LIBPQ_OPTIONS,
    PREPARED_STATEMENTS,
    FlowForgePostgresFactory,
)
from flowforge.redaction import redacted

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

    def eventsourcing_env(
        self, *, create_tables: bool, prepared_statements: bool = True
    ) -> dict[str, str]:
        """The library's settings; it creates its event table only when migrating."""
        return {
            **self.env,
            "CREATE_TABLE": "y" if create_tables else "n",
            PREPARED_STATEMENTS: "y" if prepared_statements else "n",
        }

    @property
    def migrates_by_default(self) -> bool:
        """Whether opening it migrates unless told otherwise: the embedded default
        (SQLite, one file, one process) sets itself up; a shared server is migrated on
        purpose (``flowforge db migrate``), never as a side effect of a start."""
        return self.dialect == "sqlite"

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
            f"database URL {redacted(url)!r} is not a valid URL ({exc}); use "
            f"postgresql://user@host:5432/dbname with a port from 1 to 65535"
        ) from exc
    if parts.scheme in ("postgresql", "postgres"):
        return _postgres(url)
    if parts.scheme == "sqlite":
        return _sqlite(url, parts.netloc, parts.path)
    raise errors.ConfigurationError(
        f"database URL {redacted(url)!r} has scheme {parts.scheme!r}; use "
        f"postgresql://user@host:5432/dbname or sqlite:///path/to/flowforge.db"
    )


def parse_listen_url(url: str, database: DatabaseLocation) -> str:
    """The URL the wake-up listener connects to: PostgreSQL, beside a PostgreSQL database."""
    listen = parse_database_url(url)
    if database.dialect != "postgres" or listen.dialect != "postgres":
        raise errors.ConfigurationError(
            f"listen database URL {redacted(url)!r} is for PostgreSQL's LISTEN beside a "
            f"PostgreSQL database URL (e.g. the server itself when the database URL goes "
            f"through PgBouncer); the database URL here is {database.dialect}: unset it"
        )
    return listen.url


#: The URL's parts that eventsourcing's own settings carry; everything else is an option.
_LIBPQ_SETTINGS = ("host", "port", "dbname", "user", "password")


def _postgres(url: str) -> DatabaseLocation:
    # libpq's own parser: it knows the multi-host form (h1:p1,h2:p2) that urlsplit cannot
    # read, percent-decoding, and which query parameters exist.
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise errors.ConfigurationError(
            f"database URL {redacted(url)!r} is not a PostgreSQL URL libpq accepts "
            f"({str(exc).strip()}); use postgresql://user@host:5432/dbname, or "
            f"postgresql://user@host1:5432,host2:5432/dbname?target_session_attrs=read-write"
        ) from exc
    dbname, hosts = params.get("dbname"), str(params.get("host") or "").split(",")
    if not dbname or not all(hosts):
        raise errors.ConfigurationError(
            f"database URL {redacted(url)!r} needs a host (or several, comma-separated) and a "
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
        # (flowforge.projections.db.postgres._on_live_connection).
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
            f"database URL {redacted(url)!r} has port {port!r} for {hosts} host(s); give each "
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
