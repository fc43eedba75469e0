"""The two database backends behind one interface: PostgreSQL and SQLite.

A :class:`Database` opens transactions; a :class:`Transaction` runs named statements from
``sql/<dialect>.sql`` with parameters named like the columns they carry, and returns rows
as plain dicts of Python values. Everything that differs between the backends (parameter
and value encoding, how a write transaction begins, driver errors) is in this module,
side by side; no other module branches on the dialect.

Both backends borrow the connection pool of the ``eventsourcing`` recorder, so the event
store and the projected tables share connections and every write is one transaction.
"""

from __future__ import annotations

import json
import re
import select
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Protocol, TypeVar
from uuid import UUID
from weakref import WeakKeyDictionary

import psycopg
import psycopg.errors
from eventsourcing import persistence as es_persistence
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from psycopg import generators, pq
from psycopg.abc import Buffer, PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Json
from psycopg.waiting import Wait

from flowforge import errors
from flowforge.projections import queries
from flowforge.projections.tables import COLUMN_KINDS, Kind

Row = dict[str, Any]
#: A named statement (``sql/*.sql``) and its parameters.
_Named = tuple[str, Mapping[str, Any] | None]
#: How the wake-up connections show in ``pg_stat_activity`` (and PgBouncer's SHOW CLIENTS).
LISTENER_APPLICATION_NAME = "flowforge-listener"
NOTIFIER_APPLICATION_NAME = "flowforge-notifier"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: A transaction whose first round trip finds its pooled connection dead sends it once
#: more, on a connection the pool has just checked (see ``_on_live_connection``).
FIRST_ROUND_TRIP_ATTEMPTS = 2


class Transaction(Protocol):
    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[Row]:
        """Run the statement called ``name``; its rows (empty for a write with none).
        ``commit``: it is the transaction's last statement, and PostgreSQL sends the
        COMMIT with it (one round trip; nothing may be written after it)."""
        ...

    def run_each(
        self, statements: Sequence[_Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        """Run the ``(name, params)`` statements in order (PostgreSQL: in one round trip,
        so none may depend on another's rows); the rows of each. ``commit`` as for
        :meth:`run`. ``unread``: the positions of statements whose rows the caller does
        not read; theirs come back empty, not loaded (a run row's definition JSON was
        most of a batch's client CPU)."""
        ...

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Run the statement called ``name``, whose rows nobody reads, in this transaction
        before anything that follows it (PostgreSQL sends it with the next statement or
        the COMMIT: one round trip fewer; its error surfaces there)."""
        ...

    def run_script(self, name: str) -> None:
        """Run every statement of a multi-statement block (DDL), without parameters."""
        ...


class Database(Protocol):
    dialect: str
    location: str
    #: Whether a commit can wake another process (PostgreSQL's NOTIFY).
    notifies: bool
    #: Whether a statement can store an event built from the row it wrote (PostgreSQL's
    #: data-modifying CTEs: the ``*_recorded`` statements).
    builds_events: bool

    def transaction(self) -> Any:
        """A context manager yielding a :class:`Transaction` that commits on success."""
        ...

    def read(self) -> Any:
        """A context manager yielding a :class:`Transaction` for queries only."""
        ...

    def notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to send NOTIFY; only where
        ``notifies`` (PostgreSQL)."""
        ...

    def listen_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to LISTEN on; only where
        ``notifies``. It goes to the listen URL when one is set (a LISTEN needs a session
        of its own on the server, which a transaction-pooling PgBouncer cannot give)."""
        ...


# --- PostgreSQL ---------------------------------------------------------------------------


#: A statement waiting to be sent: a named one with its parameters, or raw SQL (DDL).
_Statement = _Named | bytes
_PARAMETER = re.compile(r"%\((\w+)\)s")
#: The statements PostgreSQL prepares (by their first word); the others (LOCK, DDL) go
#: unnamed, parsed each time.
_PREPARABLE = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES"})
_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"


@dataclass(frozen=True, slots=True)
class _Template:
    """One named statement as the extended protocol takes it: its text with ``$n``
    standing for the parameter ``order[n-1]``, prepared once per session under ``name``
    (``None``: a statement that is never prepared, sent unnamed each time)."""

    name: bytes | None
    body: bytes
    order: tuple[str, ...]

    @classmethod
    def of(cls, name: str, statement: str) -> _Template:
        order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            if match[1] not in order:
                order.append(match[1])
            return f"${order.index(match[1]) + 1}"

        body = _PARAMETER.sub(positional, statement).replace("%%", "%")
        preparable = statement.split(None, 1)[0].upper() in _PREPARABLE
        return cls(
            name=f"flowforge_{name}".encode() if preparable else None,
            body=body.encode(),
            order=tuple(order),
        )

    @property
    def prepare(self) -> bytes | None:
        """The statement as SQL's PREPARE takes it (the plans' test explains it so)."""
        if self.name is None:
            return None
        return b"PREPARE " + self.name + b" AS " + self.body


@cache
def _templates() -> Mapping[str, _Template]:
    return {name: _Template.of(name, text) for name, text in queries.load("postgres").items()}


class _Session:
    """What FlowForge keeps per server session: the statements it prepared there, and
    the transformer that dumps parameters and loads rows for that connection."""

    __slots__ = ("adapters", "prepared")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.prepared: set[bytes] = set()
        self.adapters = Transformer(conn)


#: Per connection: a new connection (a reconnect) starts with nothing prepared.
_SESSIONS: WeakKeyDictionary[psycopg.Connection[Any], _Session] = WeakKeyDictionary()


def _session(conn: psycopg.Connection[Any]) -> _Session:
    session = _SESSIONS.get(conn)
    if session is None:
        session = _SESSIONS[conn] = _Session(conn)
    return session


@dataclass(frozen=True, slots=True)
class _Query:
    """One query of a pipeline, its parameters already dumped (nothing can fail on
    FlowForge's side once the first is sent); ``prepare``: parse it under ``name``
    first, in the same pipeline."""

    name: bytes | None
    body: bytes
    values: Sequence[Buffer | None] | None = None
    formats: Sequence[pq.Format] | None = None
    prepare: bool = False

    def send(self, pgconn: pq.abc.PGconn) -> None:
        """Queue it (after its PREPARE, which makes a result of its own)."""
        if self.name is None:
            pgconn.send_query_params(self.body, self.values, param_formats=self.formats)
            return
        if self.prepare:
            pgconn.send_prepare(self.name, self.body)
        pgconn.send_query_prepared(self.name, self.values, param_formats=self.formats)


def _query(
    session: _Session, statement: _Statement, *, prepared: bool, preparing: set[bytes]
) -> _Query:
    """One statement of a batch as a query of the pipeline; ``preparing``: the names
    the batch prepares before it (a statement twice in a batch is prepared once)."""
    if isinstance(statement, bytes):
        return _Query(None, statement)
    name, params = statement
    template = _templates()[name]
    given = params or {}
    # Only the parameters the statement uses: a caller's mapping may carry more (an
    # edge's every end, an event's every field). Bytes (an event's state) go as binary,
    # as they are; the rest as text the server parses as the type it inferred.
    values = [_encode_postgres(key, given[key]) for key in template.order]
    formats = [PyFormat.BINARY if isinstance(v, bytes) else PyFormat.TEXT for v in values]
    adapters = session.adapters
    dumped = adapters.dump_sequence(values, formats) if values else None
    pq_formats = adapters.formats if values else None
    if not prepared or template.name is None:
        return _Query(None, template.body, dumped, pq_formats)
    prepare = template.name not in session.prepared and template.name not in preparing
    if prepare:
        preparing.add(template.name)
    return _Query(template.name, template.body, dumped, pq_formats, prepare)


def _send_batch(
    conn: psycopg.Connection[Any],
    batch: list[_Statement],
    *,
    prepared: bool,
    begin: bool = False,
    commit: bool = False,
    read: Sequence[bool] = (),
) -> list[list[Row]]:
    """ONE round trip: ``batch`` (after BEGIN, before COMMIT, if asked) as one pipeline
    of extended-protocol queries closed by one Sync; the rows of each of its last
    ``len(read)`` statements, loaded where ``read`` says so (else empty).

    The server runs the queries in order and skips everything after the first error up
    to the Sync: the transaction is then aborted and nothing after the error runs,
    COMMIT included.
    """
    session = _session(conn)
    queries_ = [_Query(None, _BEGIN)] if begin else []
    preparing: set[bytes] = set()
    queries_ += [
        _query(session, statement, prepared=prepared, preparing=preparing) for statement in batch
    ]
    if commit:
        queries_.append(_Query(None, _COMMIT))
    results = _pipeline(conn, session, queries_)
    last = len(results) - (1 if commit else 0)
    tail = results[last - len(read) : last]
    return [_loaded(conn, r) if wanted else [] for r, wanted in zip(tail, read, strict=True)]


def _pipeline(
    conn: psycopg.Connection[Any], session: _Session, batch: Sequence[_Query]
) -> list[pq.abc.PGresult]:
    """Send ``batch`` in pipeline mode with one Sync, wait for every result; one result
    per query (a PREPARE's own is checked, not returned). Straight to libpq: a psycopg
    cursor costs ~100 µs of client CPU for each new query text, and a pipeline of
    cursors more. An error result raises, after every result up to the Sync is read and
    every statement the server prepared is noted (a PREPARE skipped after an error is
    not: it is sent again next time)."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    try:
        for query in batch:
            query.send(pgconn)
        pgconn.pipeline_sync()
        results: list[pq.abc.PGresult] = conn.wait(_pipeline_results(pgconn))
    finally:
        try:
            pgconn.exit_pipeline_mode()
        except psycopg.Error:
            # Results left unread (the wait was interrupted): nothing else may run on
            # this session, so it is closed and the pool replaces it.
            conn.close()
    expected = len(batch) + sum(query.prepare for query in batch)
    if len(results) != expected:
        raise psycopg.InternalError(f"{len(results)} results for {expected} expected")
    replies = iter(results)
    own = []
    for query in batch:
        if query.prepare:
            parsed = next(replies)
            if parsed.status == pq.ExecStatus.COMMAND_OK and query.name is not None:
                session.prepared.add(query.name)
        own.append(next(replies))
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return own


def _pipeline_results(pgconn: pq.abc.PGconn) -> PQGen[list[pq.abc.PGresult]]:
    """Flush the pipeline, then read every query's result up to the Sync's: in one
    loop, not a generator per query (each cost ~3 µs of client CPU)."""
    yield from generators.send(pgconn)
    results: list[pq.abc.PGresult] = []
    while True:
        if pgconn.is_busy():
            while not (yield Wait.R):
                pass
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:  # the end of one query's results
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        results.append(result)


def _simple_query(conn: psycopg.Connection[Any], query: bytes) -> list[pq.abc.PGresult]:
    """Send ``query`` (one or more statements, no parameters), wait for every result;
    the results, one per statement (a ROLLBACK)."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    conn.pgconn.send_query(query)
    results: list[pq.abc.PGresult] = conn.wait(generators.execute(conn.pgconn))
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return results


def _loaded(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> list[Row]:
    """A result's rows as dicts of Python values (none for a statement without rows)."""
    if result.status != pq.ExecStatus.TUPLES_OK or not result.ntuples:
        # Many statements of a batch match nothing (a guarded edge not taken, a mark not
        # needed): no column names or loaders to set up for no rows.
        return []
    names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
    loader = _session(conn).adapters
    loader.set_pgresult(result)
    return loader.load_rows(0, result.ntuples, lambda row: dict(zip(names, row, strict=True)))


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End the open transaction, if any, on a live connection; quietly (the error that
    made us roll back says more than one from the ROLLBACK)."""
    if conn.closed or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with suppress(psycopg.Error):
        _simple_query(conn, b"ROLLBACK")


class _PostgresStatements:
    """Statements on one pooled connection, sent in batches (:func:`_send_batch`): what
    a read and a write transaction share.

    A statement whose rows the caller needs (:meth:`run`) goes out at once, with any
    pending ones before it; :meth:`run_each` sends several whose inputs do not depend on
    each other's rows in one round trip. The first round trip is the probe of
    ``_on_live_connection``: it commits nothing, so a dead connection found there is
    replaced and the batch sent again. ``begins``: a write's BEGIN goes with it (a read
    runs in autocommit: at READ COMMITTED every statement of a transaction took its own
    snapshot anyway).

    The statements of a round trip go as one pipeline of extended-protocol queries with
    one Sync, their parameters out of band (bytes as binary, the rest as text): nothing
    is quoted into SQL text, and the server parses no literals. With prepared statements
    on, each statement is prepared once per session (its Parse goes in the pipeline
    that first uses it), so the server plans it once; off (behind PgBouncer), each goes
    as an unnamed statement.
    """

    def __init__(
        self, datastore: PostgresDatastore, stack: ExitStack, *, prepared: bool, begins: bool
    ) -> None:
        self._datastore = datastore
        self._stack = stack
        self._prepared = prepared
        self._begins = begins
        self._pending: list[_Statement] = []
        self._conn: psycopg.Connection[Any] | None = None
        self._committed = False

    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[Row]:
        (rows,) = self._round_trip([(name, params)], commit=commit)
        return rows

    def run_each(
        self, statements: Sequence[_Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        read = [i not in unread for i in range(len(statements))]
        return self._round_trip(statements, commit=commit, read=read)

    def _round_trip(
        self,
        statements: Sequence[_Statement],
        *,
        commit: bool = False,
        read: Sequence[bool] | None = None,
    ) -> list[list[Row]]:
        """The pending statements and ``statements``, sent (with the COMMIT if
        ``commit``); the rows of each of the latter (empty where ``read`` says no)."""
        self._refuse_after_commit("a statement")
        read = [True] * len(statements) if read is None else read
        if commit:
            return self._last_round_trip(statements, read)
        batch, self._pending = [*self._pending, *statements], []
        if self._conn is not None:
            return _send_batch(self._conn, batch, prepared=self._prepared, read=read)

        def first(conn: psycopg.Connection[Any]) -> list[list[Row]]:
            try:
                return _send_batch(
                    conn, batch, prepared=self._prepared, begin=self._begins, read=read
                )
            except psycopg.Error:
                _roll_back(conn)
                raise

        self._conn, rows = _on_live_connection(self._datastore, self._stack, first)
        return rows

    def _last_round_trip(
        self, statements: Sequence[_Statement], read: Sequence[bool]
    ) -> list[list[Row]]:
        raise TypeError("only a write transaction commits")

    def _refuse_after_commit(self, what: str) -> None:
        if self._committed:
            raise TypeError(f"{what} after this transaction's last statement, which committed it")


class _PostgresTransaction(_PostgresStatements):
    """A write transaction, sent in as few round trips as it can be.

    A statement whose rows nobody reads (:meth:`defer`: an event, an outbox row, a
    wake-up mark) waits and goes with the next statement, or with the COMMIT; BEGIN goes
    with the first. A transaction sent whole in one round trip (a claim, a finish, a
    run's creation) needs neither: its pipeline is one implicit transaction. Each round
    trip, and each query in it, costs CPU on both sides (docs/performance.md).
    Deferring changes no outcome: the statements run in the same order in the same
    transaction, and an error in any of them (the events' primary key, the second
    guard) aborts the transaction before it commits.

    A round trip that commits (its COMMIT, or its Sync ending a whole transaction) is
    never the probe that may be sent twice: a commit lost on the wire may or may not
    have applied, and that must surface, not be sent again.
    """

    def __init__(self, datastore: PostgresDatastore, stack: ExitStack, *, prepared: bool) -> None:
        super().__init__(datastore, stack, prepared=prepared, begins=True)

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        self._refuse_after_commit(name)
        self._pending.append((name, params))

    def _last_round_trip(
        self, statements: Sequence[_Statement], read: Sequence[bool]
    ) -> list[list[Row]]:
        """The whole rest of the transaction in one round trip, COMMIT included. A whole
        transaction (nothing was sent yet: a claim, a finish, a run's creation) goes
        without BEGIN and COMMIT: a pipeline's statements up to its Sync are one
        implicit transaction, which the Sync commits (or, after an error, rolls back).
        It is never sent twice: a connection lost during it may have committed, so the
        error surfaces. A connection the server already closed is not used
        (``_live_connection``: no round trip to find out)."""
        batch, self._pending = [*self._pending, *statements], []
        whole = self._conn is None
        if self._conn is None:
            self._conn = _live_connection(self._datastore, self._stack)
        try:
            rows = _send_batch(
                self._conn, batch, prepared=self._prepared, commit=not whole, read=read
            )
        except psycopg.Error:
            _roll_back(self._conn)
            raise
        self._committed = True
        return rows

    def run_script(self, name: str) -> None:
        for statement in queries.statements(queries.load("postgres")[name]):
            self._round_trip([statement.encode()])

    def commit(self) -> None:
        """Send what is pending with the COMMIT. A transaction nothing of which was
        sent yet (a run's creation) goes whole, in ONE round trip, as a claim does."""
        if self._committed or (self._conn is None and not self._pending):
            return  # committed already, or nothing was sent and nothing is open
        self._last_round_trip([], [])

    def rollback(self) -> None:
        """After an error: end the transaction, if one is open on a live connection."""
        if self._conn is not None:
            _roll_back(self._conn)


def _encode_postgres(name: str, value: Any) -> Any:
    if value is not None and COLUMN_KINDS.get(name) is Kind.JSON:
        return Json(value)
    return value


_Probed = TypeVar("_Probed")


def _on_live_connection(
    datastore: PostgresDatastore,
    stack: ExitStack,
    probe: Callable[[psycopg.Connection[Any]], _Probed],
) -> tuple[psycopg.Connection[Any], _Probed]:
    """``probe`` (the first round trip of a write or a read) on a pooled connection
    whose exits go on ``stack``; that connection and the probe's result.

    The pool does not ping a connection before lending it (that was a round trip on
    every transaction, and after a mass kill the pool checked its dead connections one
    at a time, waiting 1, 2, 4 s between them). Instead a connection found dead by the
    probe is dropped, the pool checks all its idle connections at once (replacing the
    dead ones), and the probe runs once more. That retry is safe because the probe
    commits nothing: nothing after it is ever retried.
    """
    for attempt in range(1, FIRST_ROUND_TRIP_ATTEMPTS + 1):
        with ExitStack() as attempt_stack:
            conn = attempt_stack.enter_context(datastore.get_connection())
            try:
                probed = probe(conn)
            except psycopg.OperationalError:
                if not conn.closed or attempt == FIRST_ROUND_TRIP_ATTEMPTS:
                    raise
            else:
                stack.push(attempt_stack.pop_all())
                return conn, probed
        # Out of the attempt's block: the dead connection went back, and was discarded.
        datastore.pool.check()
    raise AssertionError("unreachable: the last attempt returns or raises")


#: Checking out a connection for a round trip that commits: how many a pool may lend
#: that the server has already closed before one is used anyway (its error surfaces).
LIVE_CONNECTION_ATTEMPTS = 2


def _live_connection(datastore: PostgresDatastore, stack: ExitStack) -> psycopg.Connection[Any]:
    """A pooled connection (its exit on ``stack``) that the server has not closed, found
    without a round trip: an idle connection has nothing to read unless the server spoke
    out of turn, which it does to end a session (a terminated backend's FATAL message, a
    restart's EOF). Such a connection is closed (the pool then drops it), the pool checks
    its other idle ones at once, and the next is taken. A connection that dies after
    this check fails in the round trip, and that error surfaces: the round trip commits,
    so it is never sent twice (``_PostgresTransaction._last_round_trip``)."""
    for attempt in range(1, LIVE_CONNECTION_ATTEMPTS + 1):
        with ExitStack() as attempt_stack:
            conn = attempt_stack.enter_context(datastore.get_connection())
            if attempt == LIVE_CONNECTION_ATTEMPTS or not _closed_by_server(conn):
                stack.push(attempt_stack.pop_all())
                return conn
            conn.close()
        datastore.pool.check()
    raise AssertionError("unreachable: the last attempt returns")


def _closed_by_server(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has anything to read (or is closed): no round trip."""
    if conn.closed:
        return True
    try:
        socket = conn.pgconn.socket
    except psycopg.OperationalError:
        return True
    if not hasattr(select, "poll"):
        # Windows has no poll(); select() has, but refuses descriptors above FD_SETSIZE
        # (1024 on Linux), which a busy process can reach: poll() where there is one.
        readable, _, _ = select.select([socket], [], [], 0)
        return bool(readable)
    poller = select.poll()
    poller.register(socket, select.POLLIN)
    return bool(poller.poll(0))


class _PostgresRead(_PostgresStatements):
    """The statements of one read, in autocommit on one pooled connection (no BEGIN,
    no COMMIT); trying its first round trip once more on a fresh connection is safe."""

    def __init__(self, datastore: PostgresDatastore, stack: ExitStack, *, prepared: bool) -> None:
        super().__init__(datastore, stack, prepared=prepared, begins=False)

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        raise TypeError(f"a read defers no write ({name}); open a transaction")

    def run_script(self, name: str) -> None:
        raise TypeError(f"a read runs no script ({name}); open a transaction")


class PostgresDatabase:
    dialect = "postgres"
    notifies = True
    builds_events = True

    def __init__(
        self, datastore: PostgresDatastore, location: str, listen_url: str | None = None
    ) -> None:
        self._datastore = datastore
        self.location = location
        self._listen_url = listen_url
        # The pool's own setting (FLOWFORGE_PREPARED_STATEMENTS) decides for the writes.
        settings = datastore.pool.kwargs
        self._prepared = not isinstance(settings, dict) or (
            settings.get("prepare_threshold") is not None
        )

    @contextmanager
    def transaction(self) -> Iterator[_PostgresTransaction]:
        with translate_errors(self.location), ExitStack() as stack:
            tx = _PostgresTransaction(self._datastore, stack, prepared=self._prepared)
            try:
                yield tx
                tx.commit()
            except BaseException:
                tx.rollback()
                raise

    @contextmanager
    def read(self) -> Iterator[_PostgresRead]:
        """Queries on a pooled connection in autocommit, with no BEGIN and COMMIT."""
        with translate_errors(self.location), ExitStack() as stack:
            yield _PostgresRead(self._datastore, stack, prepared=self._prepared)

    def notify_connection(self) -> psycopg.Connection[Any]:
        return self._pool_settings_connection(NOTIFIER_APPLICATION_NAME)

    def listen_connection(self) -> psycopg.Connection[Any]:
        if self._listen_url is None:
            return self._pool_settings_connection(LISTENER_APPLICATION_NAME)
        # The URL's own connect_timeout, if it has one, wins over the default here.
        conninfo = make_conninfo("connect_timeout=5", **conninfo_to_dict(self._listen_url))
        return psycopg.connect(
            conninfo, autocommit=True, application_name=LISTENER_APPLICATION_NAME
        )

    def _pool_settings_connection(self, application_name: str) -> psycopg.Connection[Any]:
        # The pool's own settings (host, port, dbname, user, password), minus its rows.
        pool_settings = self._datastore.pool.kwargs
        if callable(pool_settings):
            pool_settings = pool_settings()
        settings = {k: v for k, v in (pool_settings or {}).items() if k != "row_factory" and v}
        # The URL's other libpq options too (``target_session_attrs=read-write``: a LISTEN
        # must reach the primary).
        conninfo = self._datastore.pool.conninfo
        if callable(conninfo):
            conninfo = conninfo()
        return psycopg.connect(
            conninfo,
            **settings,
            autocommit=True,
            connect_timeout=5,
            application_name=application_name,
        )


# --- SQLite -------------------------------------------------------------------------------


class _SqliteTransaction:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self._queries = queries.load("sqlite")

    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[Row]:
        # ``commit``: a round trip's worth only on PostgreSQL; SQLite commits at the end.
        encoded = {k: _encode_sqlite(k, v) for k, v in (params or {}).items()}
        self._cursor.execute(self._queries[name], encoded)
        return [_decode_sqlite(row) for row in self._cursor.fetchall()]

    def run_each(
        self, statements: Sequence[_Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        rows = [self.run(name, params) for name, params in statements]
        return [[] if i in unread else found for i, found in enumerate(rows)]

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        # In-process: no round trip to save.
        self.run(name, params)

    def run_script(self, name: str) -> None:
        for statement in queries.statements(self._queries[name]):
            self._cursor.execute(statement)


def _encode_sqlite(name: str, value: Any) -> Any:
    if value is None:
        return None
    kind = COLUMN_KINDS.get(name)
    if kind is Kind.UUID:
        return str(value)
    if kind is Kind.ORIGINATOR_ID:
        return value.hex if isinstance(value, UUID) else value
    if kind is Kind.TIMESTAMP:
        return (value - _EPOCH) // _MICROSECOND
    if kind is Kind.JSON:
        return json.dumps(value)
    return value


def _decode_sqlite(row: sqlite3.Row) -> Row:
    decoded: Row = {}
    for name in row.keys():  # noqa: SIM118 - sqlite3.Row is not a mapping
        value, kind = row[name], COLUMN_KINDS.get(name)
        if value is not None and kind is not None:
            if kind in (Kind.UUID, Kind.ORIGINATOR_ID):
                value = UUID(value)
            elif kind is Kind.TIMESTAMP:
                value = _EPOCH + value * _MICROSECOND
            else:
                value = json.loads(value)
        decoded[name] = value
    return decoded


class SqliteDatabase:
    dialect = "sqlite"
    # One process: the store's in-process bells are the whole story.
    notifies = False
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

    def notify_connection(self) -> psycopg.Connection[Any]:
        raise NotImplementedError("SQLite has no notifications; the bells are in-process")

    def listen_connection(self) -> psycopg.Connection[Any]:
        raise NotImplementedError("SQLite has no notifications; the bells are in-process")

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


# --- errors -------------------------------------------------------------------------------

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
