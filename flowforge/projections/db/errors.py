"""Driver errors (psycopg's, sqlite3's, the ``eventsourcing`` library's) become FlowForge
errors here, in one place, with what to do about them."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg.errors
from eventsourcing import persistence as es_persistence

from flowforge import errors

_UNAVAILABLE = (
    es_persistence.OperationalError,
    es_persistence.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


@contextmanager
def translate_errors(location: str) -> Iterator[None]:
    """Driver errors become FlowForge errors here, in one place, chained to the cause."""
    try:
        yield
    except errors.FlowForgeError:
        raise
    except Exception as exc:
        translated = _translated(exc, location)
        if translated is None:
            raise
        raise translated from exc


def _translated(exc: Exception, location: str) -> errors.FlowForgeError | None:
    if isinstance(exc, _LOST_PREPARED_STATEMENT):
        return errors.ConfigurationError(
            f"the database at {location} does not know a statement this connection "
            f"prepared ({_first_line(exc)}): the database URL goes through a pooler in "
            f"transaction mode (PgBouncer) that cannot keep prepared statements; set "
            f"FLOWFORGE_PREPARED_STATEMENTS=off (docs/deployment.md, 'PgBouncer')"
        )
    if _is_conflict(exc):
        return errors.TransactionConflictError(
            f"the database at {location} rolled the transaction back to break a conflict "
            f"with another ({_first_line(exc)}); nothing was written, and it is safe to retry"
        )
    if isinstance(exc, _UNAVAILABLE):
        return errors.DatabaseUnavailableError(
            f"the database at {location} is unavailable ({_first_line(exc)}); "
            f"{_advice(str(exc), location)}"
        )
    if isinstance(exc, sqlite3.OperationalError):
        return errors.DatabaseUnavailableError(
            f"the SQLite database {location} refused the operation ({exc}); check the "
            f"file's permissions and that no other program holds a long write lock"
        )
    if isinstance(exc, (es_persistence.PersistenceError, psycopg.Error, sqlite3.Error)):
        return errors.PersistenceError(
            f"the database at {location} refused the operation: {_first_line(exc)}"
        )
    return None


#: A prepared statement missing from, or already in, the server session: a pooler in
#: transaction mode sent the connection's statements to another session.
_LOST_PREPARED_STATEMENT = (
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)

#: What PostgreSQL says when a connection names something that is not there.
_MISSING_DATABASE = re.compile(r'database "(?P<name>[^"]+)" does not exist')
_MISSING_ROLE = re.compile(r'role "(?P<name>[^"]+)" does not exist')
_BAD_PASSWORD = re.compile(r'password authentication failed for user "(?P<name>[^"]+)"')


def _advice(message: str, location: str) -> str:
    """What to do, naming what is missing and the command that creates it."""
    address, _, _ = location.partition("/")
    host, _, port = address.rpartition(":")
    server = f"-h {host} -p {port}"
    if match := _MISSING_DATABASE.search(message):
        name = match["name"]
        return (
            f"the server is up but has no database {name!r}: create it with "
            f'`createdb {server} -U postgres {name}` (or CREATE DATABASE "{name}"; as a '
            f"user allowed to), then create its tables with `flowforge db init`"
        )
    if match := _MISSING_ROLE.search(message):
        name = match["name"]
        return (
            f"the server is up but has no role (user) {name!r}: create it with "
            f"`psql {server} -U postgres -c 'CREATE ROLE \"{name}\" LOGIN'` (add PASSWORD "
            f"'...' if the URL has one), or fix the user name in the URL"
        )
    if match := _BAD_PASSWORD.search(message):
        return (
            f"the server refused the password of {match['name']!r}: check the password in "
            f"the database URL"
        )
    return "check that it is running and reachable, then retry"


def _is_conflict(exc: BaseException) -> bool:
    # The library wraps psycopg's errors in its own: look down the chain too.
    # A lock timeout too: the server gave up waiting for another transaction's lock
    # (the rebuild's own, on purpose; or a role's lock_timeout) and wrote nothing.
    conflicts = (
        psycopg.errors.DeadlockDetected,
        psycopg.errors.SerializationFailure,
        psycopg.errors.LockNotAvailable,
    )
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, conflicts):
            return True
        seen = seen.__cause__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
