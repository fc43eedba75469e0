"""A round trip on PostgreSQL is one pipeline of extended-protocol queries with one Sync
(``pipeline.send_batch``; docs/architecture.md, "Writes in few round trips"), on a real
server: all or nothing, each statement prepared once per session, and prepared again
when the server skipped its Parse; parameters out of band, bytes exactly."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import psycopg
import pytest
from psycopg import pq

from flowforge.app.service import FlowForge
from flowforge.projections.db import pipeline
from flowforge.projections.db.protocols import Row

TOPIC = "tests:Event"


@pytest.fixture
def conn(pg_app: FlowForge, postgres_url: str) -> Iterator[psycopg.Connection]:
    """A session of its own on the migrated database: nothing prepared in it yet."""
    del pg_app  # only for the schema
    with psycopg.connect(postgres_url, autocommit=True) as session:
        yield session


def _event(originator_id: object, state: bytes) -> tuple[str, dict[str, object]]:
    params = {"originator_id": originator_id, "originator_version": 1, "topic": TOPIC}
    return "insert_stored_event", {**params, "state": state}


def _rows(
    conn: psycopg.Connection, statement: pipeline.Statement, *, prepared: bool = True
) -> list[Row]:
    """The rows of one statement sent alone, in autocommit."""
    (rows,) = pipeline.send_batch(conn, [statement], prepared=prepared, read=[True])
    return rows


def _prepared(conn: psycopg.Connection) -> set[bytes]:
    return pipeline._session(conn).prepared


def test_a_failing_statement_undoes_its_pipeline_and_a_parse_it_skipped_is_sent_again(
    conn: psycopg.Connection,
) -> None:
    written, after = uuid4(), uuid4()
    with pytest.raises(psycopg.errors.DivisionByZero):
        pipeline.send_batch(
            conn,
            [_event(written, b"{}"), b"SELECT 1/0", ("select_task_run", {"id": after})],
            prepared=True,
            begin=True,
            commit=True,
        )
    pipeline.roll_back(conn)
    # The event before the error was undone, the statement after it never ran: its Parse
    # was skipped with it, so it is not noted as prepared...
    assert b"flowforge_select_task_run" not in _prepared(conn)
    assert b"flowforge_insert_stored_event" in _prepared(conn)  # parsed before the error
    events = _rows(conn, ("select_stored_events", None))
    assert [e for e in events if e["originator_id"] == written] == []
    # ...and is prepared when next sent (noted as prepared, it would not exist).
    assert _rows(conn, ("select_task_run", {"id": after})) == []
    assert b"flowforge_select_task_run" in _prepared(conn)


def test_a_pipeline_sent_without_begin_is_one_transaction_a_later_error_undoes_whole(
    conn: psycopg.Connection,
) -> None:
    # A write transaction sent whole (a claim, a finish, a run's creation) goes with no
    # BEGIN and no COMMIT: its statements up to the one Sync are one implicit
    # transaction. Two writes, then an error: both writes are undone, the session is
    # left with no transaction open, and the same writes alone commit.
    first, second = uuid4(), uuid4()
    writes: list[pipeline.Statement] = [_event(first, b"{}"), _event(second, b"{}")]
    with pytest.raises(psycopg.errors.DivisionByZero):
        pipeline.send_batch(conn, [*writes, b"SELECT 1/0"], prepared=True)
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    events = _rows(conn, ("select_stored_events", None))
    assert [e for e in events if e["originator_id"] in (first, second)] == []
    pipeline.send_batch(conn, writes, prepared=True)  # the control: sound writes commit
    events = _rows(conn, ("select_stored_events", None))
    assert sorted(e["originator_id"] for e in events if e["topic"] == TOPIC) == sorted(
        [first, second]
    )


def test_a_statement_twice_in_one_pipeline_is_prepared_once_and_bytes_arrive_exactly(
    conn: psycopg.Connection,
) -> None:
    # Not UTF-8, a NUL, a quote and a backslash: sent as binary, nothing to escape.
    one, other = uuid4(), uuid4()
    states = {one: b"\x00\xff'\\{}", other: bytes(range(256))}
    pipeline.send_batch(
        conn,
        [_event(one, states[one]), _event(other, states[other])],
        prepared=True,
        begin=True,
        commit=True,
    )
    events = _rows(conn, ("select_stored_events", None))
    stored = {e["originator_id"]: bytes(e["state"]) for e in events if e["topic"] == TOPIC}
    assert stored == states


@pytest.mark.parametrize("prepared", [True, False])
def test_text_parameters_arrive_as_the_types_the_server_inferred(
    conn: psycopg.Connection, prepared: bool
) -> None:
    # A quote, a backslash and non-ASCII text in a text parameter; a UUID, an int.
    key = "it's a \\ ключ"
    run_id = uuid4()
    statement = ("insert_workflow_run", {**_run(run_id), "idempotency_key": key})
    assert _rows(conn, statement, prepared=prepared) == [{"id": run_id}]
    found = _rows(conn, ("select_run_by_idempotency_key", {"idempotency_key": key}))
    assert found == [{"id": run_id}]
    assert _rows(conn, b"SELECT 1 AS one", prepared=prepared) == [{"one": 1}]


def _run(run_id: object) -> dict[str, object]:
    return {
        "id": run_id,
        "workflow_name": "w",
        "definition": {"name": "w", "tasks": []},
        "inputs": {"x": [1, 2.5, None, "é"]},
        "rerun_of": None,
        "start_at": None,
        "trace_context": None,
        "state": "pending",
        "version": 1,
        "created_at": None,
    }
