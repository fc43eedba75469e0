"""A pool whose connections were all killed recovers at once; a lost COMMIT surfaces.

Real PostgreSQL, real ``pg_terminate_backend``: the database kills FlowForge's backends
exactly as an operator, a failover or a chaos test would. See docs/architecture.md
("Connections: pooling and reconnects").
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.projections.db.protocols import Database, Listener, Notifier, Transaction
from flowforge.projections.wakeups import Wakeups
from tests.e2e.cluster import admin
from tests.helpers import claim, race, wait_until

pytestmark = pytest.mark.postgres

#: The pool keeps this many connections open (POSTGRES_POOL_SIZE): the test kills them all.
POOL_CONNECTIONS = 4
#: A bound that only ends a broken test; polling stops as soon as the condition holds.
DEADLINE_S = 30.0
#: How long a command may take right after every connection was killed. The old pool
#: checked its dead connections one by one with waits of 0, 1 and 2 s (then timed out at
#: 5 s); a fresh local connection takes milliseconds. 2 s is far below the 3 s that the
#: old path spends before its fourth check, and far above a fresh connect plus a few
#: pings on a loaded two-core machine.
PROMPT_S = 2.0
ONE_TASK = {"name": "one", "lease_seconds": 5, "tasks": [{"key": "only", "type": "noop"}]}


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _backends(dbname: str, state: str | None = None) -> int:
    with admin() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND (%s::text IS NULL OR state = %s)",
            (dbname, state, state),
        ).fetchone()
    return int(row[0]) if row else 0


def _kill_backends(dbname: str, state: str | None = None) -> int:
    """Terminate the database's backends (in ``state`` if given); wait until they are gone."""
    with admin() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE datname = %s AND backend_type = 'client backend'"
            " AND (%s::text IS NULL OR state = %s)",
            (dbname, state, state),
        ).fetchall()
    assert all(terminated for (terminated,) in rows)
    return len(rows)


def _wait_for_full_pool(dbname: str) -> None:
    """The pool opens its connections in the background: wait until all are open."""
    wait_until(lambda: _backends(dbname) >= POOL_CONNECTIONS, DEADLINE_S, "a full pool")


def _ready_task(app: FlowForge) -> UUID:
    run_id = app.start_workflow_run(ONE_TASK)
    app.advance_workflow_run(run_id)
    (task,) = app.task_runs(run_id)
    return task.id


@pytest.fixture
def claimed_then_killed(pg_app: FlowForge, postgres_url: str) -> tuple[UUID, int]:
    """A claimed task's id and token, after every connection of the pool was killed."""
    task_id = _ready_task(pg_app)
    won = claim(pg_app, task_id, "worker-1")
    dbname = _dbname(postgres_url)
    _wait_for_full_pool(dbname)
    assert _kill_backends(dbname) >= POOL_CONNECTIONS
    return task_id, won.fencing_token


def test_after_every_connection_is_killed_the_next_heartbeat_succeeds_at_once(
    pg_app: FlowForge, claimed_then_killed: tuple[UUID, int]
) -> None:
    task_id, token = claimed_then_killed

    started = time.monotonic()
    renewed = pg_app.renew_lease(task_id, token, 5)
    elapsed = time.monotonic() - started

    assert renewed is True
    assert elapsed < PROMPT_S, f"the heartbeat took {elapsed:.2f} s after the kill"


def test_without_poll_a_heartbeat_still_finds_the_killed_connections_without_sending(
    pg_app: FlowForge, claimed_then_killed: tuple[UUID, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows has no select.poll: the check falls back to select.select. A heartbeat is
    # one round trip with its COMMIT, never sent twice: sent on a dead connection it
    # would raise, so it succeeds only if the check found every killed one.
    monkeypatch.delattr(select, "poll")
    task_id, token = claimed_then_killed
    assert pg_app.renew_lease(task_id, token, 5) is True


def test_after_every_connection_is_killed_concurrent_commands_all_succeed(
    pg_app: FlowForge, claimed_then_killed: tuple[UUID, int]
) -> None:
    # Eight threads (more than the pool keeps) meet the dead connections at once: each
    # must get a fresh connection, none an error (race raises any).
    task_id, token = claimed_then_killed
    threads = 8

    renewed = race(*[lambda: pg_app.renew_lease(task_id, token, 5)] * threads)

    assert renewed == [True] * threads


def test_after_every_connection_is_killed_concurrent_reads_all_succeed(
    pg_app: FlowForge, claimed_then_killed: tuple[UUID, int]
) -> None:
    # A read runs in autocommit, without a BEGIN to probe the connection: its first
    # statement is the probe, and a read is always safe to try once more.
    task_id, token = claimed_then_killed

    read = race(*[lambda: pg_app.get_task_run(task_id)] * 8)

    assert [(task.state, task.fencing_token) for task in read] == [("running", token)] * 8


class _KillBeforeCommit:
    """The app's database, except that once a transaction's body has run, its backend is
    terminated: the COMMIT that follows goes out on a dead connection. From the client's
    side that is a lost COMMIT, which it can never tell from one the server applied."""

    def __init__(self, inner: Database, dbname: str) -> None:
        self._inner = inner
        self._dbname = dbname
        self.dialect = inner.dialect
        self.location = inner.location
        self.builds_events = inner.builds_events
        self.bodies_run = 0

    def notifier(self) -> Notifier:
        return self._inner.notifier()

    def listener(self, wakeups: Wakeups) -> Listener:
        return self._inner.listener(wakeups)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self._inner.transaction() as tx:
            yield tx
            self.bodies_run += 1
            assert _kill_backends(self._dbname, state="idle in transaction") == 1

    def read(self) -> AbstractContextManager[Transaction]:
        return self._inner.read()

    def archiver_lock(self) -> AbstractContextManager[bool]:
        return self._inner.archiver_lock()


def test_a_connection_lost_at_commit_surfaces_and_the_command_is_not_retried(
    pg_app: FlowForge, postgres_url: str
) -> None:
    # A cancel is two round trips (the conditional write, then its mark with the COMMIT).
    task_id = _ready_task(pg_app)
    real, killing = pg_app.database, _KillBeforeCommit(pg_app.database, _dbname(postgres_url))
    pg_app.database = killing
    try:
        with pytest.raises(errors.DatabaseUnavailableError):
            pg_app.transition_task_run(task_id, "cancel_ready")
    finally:
        pg_app.database = real

    assert killing.bodies_run == 1
    assert pg_app.get_task_run(task_id).state == "ready"  # the lost COMMIT applied nothing
    assert pg_app.transition_task_run(task_id, "cancel_ready") is True


def _wait_for_a_backend_waiting_on_a_lock(dbname: str, query: str) -> int:
    def waiting() -> int | None:
        with admin() as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                (dbname, query),
            ).fetchone()
        return None if row is None else int(row[0])

    wait_until(lambda: waiting() is not None, DEADLINE_S, f"a statement like {query} waiting")
    pid = waiting()
    assert pid is not None
    return pid


def _killed_in_flight(
    postgres_url: str,
    hold: str,
    params: tuple[Any, ...],
    command: Callable[[], object],
    query: str,
) -> BaseException | object:
    """What ``command`` returns or raises when its backend is killed while it waits for
    a lock another transaction took with ``hold`` (its query matching ``query``)."""
    outcome: list[BaseException | object] = []

    def in_flight() -> None:
        try:
            outcome.append(command())
        except BaseException as exc:
            outcome.append(exc)

    with admin(postgres_url) as holder:
        holder.execute("BEGIN")
        holder.execute(hold, params)
        thread = threading.Thread(target=in_flight)
        thread.start()
        pid = _wait_for_a_backend_waiting_on_a_lock(_dbname(postgres_url), query)
        with admin() as killer:
            killer.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        thread.join(DEADLINE_S)
        holder.execute("ROLLBACK")
    assert not thread.is_alive()
    (result,) = outcome
    return result


def test_a_connection_lost_during_a_one_round_trip_claim_surfaces_and_is_not_sent_again(
    pg_app: FlowForge, postgres_url: str
) -> None:
    # A claim is ONE round trip that commits: lost in flight, it may or may not
    # have committed, so it must surface. Here the row is locked so the claim is still
    # in flight when its backend is killed; a claim sent again on a fresh connection
    # would wait for the lock's release and then win, instead of raising.
    task_id = _ready_task(pg_app)
    raised = _killed_in_flight(
        postgres_url,
        "SELECT 1 FROM task_runs WHERE id = %s FOR UPDATE",
        (task_id,),
        lambda: pg_app.claim_task_run(task_id, "worker-1", 5),
        "%UPDATE task_runs%",  # the claim's statement, waiting on the row
    )
    assert isinstance(raised, errors.DatabaseUnavailableError), raised
    assert pg_app.get_task_run(task_id).state == "ready"  # killed before it applied
    assert pg_app.claim_task_run(task_id, "worker-1", 5) is not None


def test_a_connection_lost_during_a_one_round_trip_creation_surfaces_and_creates_nothing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    # A run's creation is ONE round trip, committed by its pipeline's Sync (its clock
    # is the transaction's own): lost in flight, it must surface. A rebuild's lock keeps
    # it in flight; sent again on a fresh connection it would have created the run once
    # the lock was released, instead of raising.
    raised = _killed_in_flight(
        postgres_url,
        "LOCK TABLE workflow_runs, task_runs IN EXCLUSIVE MODE",
        (),
        lambda: pg_app.start_workflow_run(ONE_TASK),
        "%INSERT INTO workflow_runs%",  # the creation's first statement, on the table
    )
    assert isinstance(raised, errors.DatabaseUnavailableError), raised
    assert pg_app.recent_runs() == []  # killed before it applied, and not sent again
    assert pg_app.start_workflow_run(ONE_TASK) is not None
