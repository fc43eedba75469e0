"""PostgreSQL's round trip: a batch of named statements as ONE libpq pipeline of
extended-protocol queries closed by one Sync (docs/architecture.md, "Writes in few round
trips"). Each statement is prepared once per server session, and its parameters go out
of band; rows come back as dicts of Python values."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
import psycopg.errors
from psycopg import generators, pq
from psycopg.abc import Buffer, PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.json import Json
from psycopg.waiting import Wait

from flowforge.projections import statements
from flowforge.projections.db.protocols import UNREAD_ROW, Named, Row
from flowforge.projections.tables import COLUMN_CODECS, ColumnCodec

#: A statement waiting to be sent: a named one with its parameters, or raw SQL (DDL).
Statement = Named | bytes
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
    return {name: _Template.of(name, text) for name, text in statements.load("postgres").items()}


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
    session: _Session, statement: Statement, *, prepared: bool, preparing: set[bytes]
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


def send_batch(
    conn: psycopg.Connection[Any],
    batch: list[Statement],
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
    return [
        _loaded(conn, r) if wanted else _unread(r) for r, wanted in zip(tail, read, strict=True)
    ]


def _pipeline(
    conn: psycopg.Connection[Any], session: _Session, batch: Sequence[_Query]
) -> list[pq.abc.PGresult]:
    """Send ``batch`` in pipeline mode with one Sync, wait for every result; one result
    per query (a PREPARE's own is checked, not returned). Straight to libpq: a psycopg
    cursor costs far more client CPU per new query text than libpq's calls, and a
    pipeline of cursors more (docs/performance.md, "Design choices that buy the
    speed"). An error result raises, after every result up to the Sync is read and
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
    loop: a generator per query costs client CPU on every round trip."""
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


def _unread(result: pq.abc.PGresult) -> list[Row]:
    """An unread result: one placeholder per row (its count, not its values)."""
    return [UNREAD_ROW] * result.ntuples if result.status == pq.ExecStatus.TUPLES_OK else []


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


def roll_back(conn: psycopg.Connection[Any]) -> None:
    """End the open transaction, if any, on a live connection; quietly (the error that
    made us roll back says more than one from the ROLLBACK)."""
    if conn.closed or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with suppress(psycopg.Error):
        _simple_query(conn, b"ROLLBACK")


_JSON_CODECS = (ColumnCodec.JSON, ColumnCodec.ORIGINATOR_ID_LIST)


def _encode_postgres(name: str, value: Any) -> Any:
    if value is not None and COLUMN_CODECS.get(name) in _JSON_CODECS:
        return Json(value)
    return value
