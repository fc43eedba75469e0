"""PostgreSQL: write transactions and reads over the recorder's pool, sent in as few
round trips as their logic allows (``pipeline.py``), and a pooled connection the server
closed found and replaced without a ping (docs/architecture.md, "Connections: pooling
and reconnects")."""

from __future__ import annotations

import select
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from flowforge import observe
from flowforge.projections import statements
from flowforge.projections.db.errors import translate_errors
from flowforge.projections.db.pipeline import Statement, roll_back, send_batch
from flowforge.projections.db.protocols import Named, Params, Row
from flowforge.projections.wakeups import PostgresListener, PostgresNotifier, Wakeups

#: How the wake-up connections show in ``pg_stat_activity`` (and PgBouncer's SHOW CLIENTS).
LISTENER_APPLICATION_NAME = "flowforge-listener"
NOTIFIER_APPLICATION_NAME = "flowforge-notifier"
#: A transaction whose first round trip finds its pooled connection dead sends it once
#: more, on a connection the pool has just checked (see ``_on_live_connection``).
FIRST_ROUND_TRIP_ATTEMPTS = 2


class _PostgresStatements:
    """Statements on one pooled connection, sent in batches (:func:`send_batch`): what
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
        self._pending: list[Statement] = []
        self._conn: psycopg.Connection[Any] | None = None
        self._committed = False

    def run(self, name: str, params: Params | None = None, *, commit: bool = False) -> list[Row]:
        (rows,) = self._round_trip([(name, params)], commit=commit)
        return rows

    def run_each(
        self, statements: Sequence[Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        read = [i not in unread for i in range(len(statements))]
        return self._round_trip(statements, commit=commit, read=read)

    def _round_trip(
        self,
        statements: Sequence[Statement],
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
            return send_batch(self._conn, batch, prepared=self._prepared, read=read)

        def first(conn: psycopg.Connection[Any]) -> list[list[Row]]:
            try:
                return send_batch(
                    conn, batch, prepared=self._prepared, begin=self._begins, read=read
                )
            except psycopg.Error:
                roll_back(conn)
                raise

        self._conn, rows = _on_live_connection(self._datastore, self._stack, first)
        return rows

    def _last_round_trip(
        self, statements: Sequence[Statement], read: Sequence[bool]
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

    def defer(self, name: str, params: Params | None = None) -> None:
        self._refuse_after_commit(name)
        self._pending.append((name, params))

    def defer_many(self, name: str, params: Sequence[Params]) -> None:
        for each in params:
            self.defer(name, each)

    def _last_round_trip(
        self, statements: Sequence[Statement], read: Sequence[bool]
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
            rows = send_batch(
                self._conn, batch, prepared=self._prepared, commit=not whole, read=read
            )
        except psycopg.Error:
            roll_back(self._conn)
            raise
        self._committed = True
        return rows

    def run_script(self, name: str) -> None:
        for statement in statements.statements(statements.load("postgres")[name]):
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
            roll_back(self._conn)


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
        observe.announce.reconnected("database")
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

    def defer(self, name: str, params: Params | None = None) -> None:
        raise TypeError(f"a read defers no write ({name}); open a transaction")

    def defer_many(self, name: str, params: Sequence[Params]) -> None:
        raise TypeError(f"a read defers no write ({name}); open a transaction")

    def run_script(self, name: str) -> None:
        raise TypeError(f"a read runs no script ({name}); open a transaction")


#: The archiver's advisory lock key (``try_archiver_lock``): "ffarchiv" as a bigint.
ARCHIVER_LOCK_KEY = int.from_bytes(b"ffarchiv", "big") & (2**63 - 1)
#: The archiver's lock connection's name in pg_stat_activity.
ARCHIVER_APPLICATION_NAME = "flowforge-archiver"


class PostgresDatabase:
    dialect = "postgres"
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

    def notifier(self) -> PostgresNotifier:
        return PostgresNotifier(self._notify_connection)

    def listener(self, wakeups: Wakeups) -> PostgresListener:
        return PostgresListener(self._listen_connection, wakeups).start()

    @contextmanager
    def archiver_lock(self) -> Iterator[bool]:
        sql, params = statements.load("postgres"), {"lock_key": ARCHIVER_LOCK_KEY}
        with translate_errors(self.location):
            conn = self._pool_settings_connection(ARCHIVER_APPLICATION_NAME)
        with conn, translate_errors(self.location):
            row = conn.execute(sql["try_archiver_lock"], params).fetchone()
            taken = bool(row and row[0])
            try:
                yield taken
            finally:
                if taken and not conn.closed:
                    conn.execute(sql["archiver_unlock"], params)

    def _notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to send NOTIFY."""
        return self._pool_settings_connection(NOTIFIER_APPLICATION_NAME)

    def _listen_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to LISTEN on: to the listen URL
        when one is set (a LISTEN needs a session of its own on the server, which a
        transaction-pooling PgBouncer cannot give)."""
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
