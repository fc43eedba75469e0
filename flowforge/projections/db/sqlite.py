"""SQLite, the embedded backend: one file, one process; write transactions take the
write lock up front, and timestamps, uuids and JSON are stored as integers and text."""

from __future__ import annotations

import fcntl
import json
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.sqlite import SQLiteDatastore

from flowforge.projections import statements
from flowforge.projections.db.errors import translate_errors
from flowforge.projections.db.protocols import UNREAD_ROW, Named, Params, Row
from flowforge.projections.tables import COLUMN_CODECS, ColumnCodec
from flowforge.projections.wakeups import InProcessOnly, Wakeups

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class _SqliteTransaction:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self._queries = statements.load("sqlite")

    def run(self, name: str, params: Params | None = None, *, commit: bool = False) -> list[Row]:
        # ``commit``: a round trip's worth only on PostgreSQL; SQLite commits at the end.
        encoded = {k: _encode_sqlite(k, v) for k, v in (params or {}).items()}
        self._cursor.execute(self._queries[name], encoded)
        return [_decode_sqlite(row) for row in self._cursor.fetchall()]

    def run_each(
        self, statements: Sequence[Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        rows = [self.run(name, params) for name, params in statements]
        return [
            [UNREAD_ROW] * len(found) if i in unread else found for i, found in enumerate(rows)
        ]

    def defer(self, name: str, params: Params | None = None) -> None:
        # In-process: no round trip to save.
        self.run(name, params)

    def defer_many(self, name: str, params: Sequence[Params]) -> None:
        encoded = [{k: _encode_sqlite(k, v) for k, v in p.items()} for p in params]
        self._cursor.executemany(self._queries[name], encoded)

    def run_script(self, name: str) -> None:
        for statement in statements.statements(self._queries[name]):
            self._cursor.execute(statement)


_SQLITE_ENCODERS: dict[ColumnCodec, Callable[[Any], Any]] = {
    ColumnCodec.UUID: str,
    ColumnCodec.ORIGINATOR_ID: lambda value: value.hex if isinstance(value, UUID) else value,
    ColumnCodec.TIMESTAMP: lambda value: (value - _EPOCH) // _MICROSECOND,
    ColumnCodec.JSON: json.dumps,
    ColumnCodec.ORIGINATOR_ID_LIST: lambda ids: json.dumps([UUID(str(i)).hex for i in ids]),
}


def _encode_sqlite(name: str, value: object) -> object:
    kind = COLUMN_CODECS.get(name)
    if value is None or kind is None:
        return value
    return _SQLITE_ENCODERS[kind](value)


def _decode_sqlite(row: sqlite3.Row) -> Row:
    decoded: Row = {}
    for name in row.keys():  # noqa: SIM118 - sqlite3.Row is not a mapping
        value, kind = row[name], COLUMN_CODECS.get(name)
        if value is not None and kind is not None:
            if kind in (ColumnCodec.UUID, ColumnCodec.ORIGINATOR_ID):
                value = UUID(value)
            elif kind is ColumnCodec.TIMESTAMP:
                value = _EPOCH + value * _MICROSECOND
            else:
                value = json.loads(value)
        decoded[name] = value
    return decoded


#: The archiver's lock of an in-memory database (``SqliteDatabase.archiver_lock``).
_MEMORY_ARCHIVER = threading.Lock()


class SqliteDatabase:
    dialect = "sqlite"
    # No data-modifying CTE: a transition's event is built in Python (writes.py).
    builds_events = False

    def __init__(self, datastore: SQLiteDatastore, location: str) -> None:
        self._datastore = datastore
        self.location = location

    def transaction(self) -> AbstractContextManager[_SqliteTransaction]:
        # BEGIN IMMEDIATE takes the write lock up front: a deferred transaction that
        # reads first and writes later fails at once (SQLITE_BUSY_SNAPSHOT) when another
        # writer committed in between, instead of waiting its turn.
        return self._begin("BEGIN IMMEDIATE", writer=True)

    def notifier(self) -> InProcessOnly:
        # One process: the store's in-process bells are the whole story.
        return InProcessOnly()

    def listener(self, wakeups: Wakeups) -> InProcessOnly:
        return InProcessOnly()

    @contextmanager
    def archiver_lock(self) -> Iterator[bool]:
        # A file lock, not a row: the kernel frees it when its holder dies, as
        # PostgreSQL frees an advisory lock with its session. flock() conflicts between
        # two opens of the file even in one process. An in-memory database has no file:
        # a lock of this process stands in.
        name = self._datastore.pool.db_name
        if self._datastore.pool.is_sqlite_memory_mode:
            taken = _MEMORY_ARCHIVER.acquire(blocking=False)
            try:
                yield taken
            finally:
                if taken:
                    _MEMORY_ARCHIVER.release()
            return
        with translate_errors(self.location), open(f"{name}.archiver-lock", "a") as file:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
            except BlockingIOError:
                taken = False
            try:
                yield taken
            finally:
                if taken:
                    fcntl.flock(file.fileno(), fcntl.LOCK_UN)

    def read(self) -> AbstractContextManager[_SqliteTransaction]:
        # A deferred transaction: a consistent snapshot that does not block writers.
        return self._begin("BEGIN", writer=False)

    @contextmanager
    def _begin(self, begin: str, *, writer: bool) -> Iterator[_SqliteTransaction]:
        with (
            translate_errors(self.location),
            self._datastore.get_connection(commit=writer) as conn,
        ):
            raw: sqlite3.Cursor = conn.cursor().__enter__()
            raw.execute(begin)
            try:
                yield _SqliteTransaction(raw)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
