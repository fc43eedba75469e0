"""Many workers, few connections: FlowForge through PgBouncer in transaction pooling mode.

Four process groups (each a scheduler, a publisher and five workers: twenty worker
threads), each with its own FlowForge and connection pool, all through one PgBouncer
whose pool holds four server connections. Real PostgreSQL, real RabbitMQ topology, a
real PgBouncer on a port of its own (tests/e2e/pgbouncer.py). See docs/architecture.md
("Through PgBouncer").
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

from flowforge.app.service import FlowForge
from flowforge.bootstrap import ProcessGroup, Transport
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.projections.db.postgres import LISTENER_APPLICATION_NAME
from tests import servers, topology
from tests.e2e.cluster import admin
from tests.e2e.pgbouncer import pgbouncer
from tests.helpers import race

pytestmark = [pytest.mark.postgres, pytest.mark.rabbitmq]

SERVER_CONNECTIONS = 4
GROUPS, WORKERS_PER_GROUP = 4, 5
WIDTH = 40
#: Each "first" task feeds a "second"; a "last" task joins them all: 81 tasks, three
#: scheduler promotions, every statement of the hot path many times per connection.
TASKS: list[dict[str, Any]] = [
    *({"key": f"first{i}", "type": "work"} for i in range(WIDTH)),
    *({"key": f"second{i}", "type": "work", "depends_on": [f"first{i}"]} for i in range(WIDTH)),
    {"key": "last", "type": "work", "depends_on": [f"second{i}" for i in range(WIDTH)]},
]
DIAMOND = {"name": "diamond", "lease_seconds": 30, "tasks": TASKS}
RUNS = 2
#: A bound that only ends a broken test: the runs take seconds.
RUN_TIMEOUT_S = 240.0


@pytest.fixture
def database() -> Iterator[str]:
    servers.require_postgres()
    dbname = f"flowforge_pgbouncer_{uuid.uuid4().hex[:8]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield dbname
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


class ServerConnections:
    """Samples, from PostgreSQL's side, how many backends serve the database (every
    10 ms, on a connection to another database, so it never counts itself): those
    PgBouncer pools, and apart from them the wake-up listeners, which connect directly."""

    def __init__(self, dbname: str) -> None:
        self._dbname = dbname
        self._stop = threading.Event()
        self.samples: list[int] = []
        self.listener_samples: list[int] = []
        self._thread = threading.Thread(target=self._sample, name="sampler")

    def __enter__(self) -> ServerConnections:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        with admin() as conn:
            while not self._stop.wait(0.01):
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE application_name <> %(listener)s),"
                    " count(*) FILTER (WHERE application_name = %(listener)s)"
                    " FROM pg_stat_activity"
                    " WHERE datname = %(dbname)s AND backend_type = 'client backend'",
                    {"dbname": self._dbname, "listener": LISTENER_APPLICATION_NAME},
                ).fetchone()
                assert row is not None
                self.samples.append(int(row[0]))
                self.listener_samples.append(int(row[1]))


def _open_apps(url: str, listen_url: str) -> list[FlowForge]:
    """Every group's FlowForge, created at once, each migrating: the schema lock races
    through PgBouncer too (as processes started with `flowforge run` would). Their
    wake-up listeners connect to PostgreSQL itself, as docs/deployment.md says to."""

    def open_app() -> FlowForge:
        # PgBouncer 1.18 cannot keep prepared statements across transactions.
        return FlowForge(
            url, migrate=True, listen_database_url=listen_url, prepared_statements=False
        )

    apps: list[FlowForge] = race(*[open_app] * GROUPS)
    return apps


def _each_server_connections_synchronous_commit(url: str) -> list[str]:
    """``synchronous_commit`` as each of PgBouncer's server connections has it: as many
    clients as it has server connections, each inside a transaction, hold one each."""
    values = []
    with ExitStack() as stack:
        for _ in range(SERVER_CONNECTIONS):
            conn = stack.enter_context(psycopg.connect(url, prepare_threshold=None))
            row = conn.execute("SHOW synchronous_commit").fetchone()  # BEGINs: holds it
            values.append(str(row[0]) if row else "")
    return values


def test_twenty_workers_through_pgbouncer_on_four_server_connections_finish_each_task_once(
    database: str,
) -> None:
    servers.require_rabbitmq()
    handled: Counter[uuid.UUID] = Counter()
    handled_lock = threading.Lock()
    registry = TaskRegistry()

    @registry.task("work")
    def work(context: TaskContext) -> dict[str, Any]:
        with handled_lock:
            handled[context.task_run_id] += 1
        return {"key": context.task_key}

    with (
        topology.own_topology("ff-pgbouncer") as broker,
        pgbouncer(database, pool_size=SERVER_CONNECTIONS) as url,
        ServerConnections(database) as server,
        ExitStack() as stack,
    ):
        transport = Transport.rabbitmq(broker)
        apps = _open_apps(url, servers.postgres_url(database))
        for app in apps:
            stack.callback(app.close)
        groups = [
            stack.enter_context(ProcessGroup(app, transport, WORKERS_PER_GROUP, registry))
            for app in apps
        ]
        run_ids = [apps[0].start_workflow_run(DIAMOND) for _ in range(RUNS)]
        states = [groups[0].wait_for(run_id, timeout=RUN_TIMEOUT_S).state for run_id in run_ids]
        errors = [error for group in groups for error in group.errors]
        assert errors == []
        assert states == ["succeeded"] * RUNS
        settings = _each_server_connections_synchronous_commit(url)
        succeeded = Counter(
            task.id
            for run_id in run_ids
            for task in apps[0].task_runs(run_id)
            for entry in apps[0].history(task.id)
            if entry.transition == "succeed"
        )

    tasks = RUNS * len(TASKS)
    assert len(succeeded) == tasks
    assert set(succeeded.values()) == {1}, "a task finished twice"
    assert len(handled) == tasks
    assert 0 < max(server.samples) <= SERVER_CONNECTIONS, f"server connections: {server.samples}"
    # The notifiers' SET LOCAL stayed in their transactions: no pooled server
    # connection was left committing asynchronously for the next client.
    assert settings == ["on"] * SERVER_CONNECTIONS
    # A scheduler's and a publisher's listener per group, none through PgBouncer.
    assert max(server.listener_samples) == 2 * GROUPS, server.listener_samples
