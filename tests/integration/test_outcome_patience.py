"""``outcome_patience`` bounds one write attempt, not only the retries between attempts:
a worker whose database stops answering (its connection goes through a proxy the test
silences: the shared server itself is untouched) gives its outcomes up when the patience
runs out, requeues their dispatches and keeps the outcomes, though the attempt it
stopped waiting for never returns while the database is silent. Real PostgreSQL.

No time is asserted: while the proxy is silent, an attempt on a pooled connection never
answers, so a worker that waited for its attempt would requeue nothing until the proxy
resumes; the requeue is awaited (60 s at most) before it does.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.worker import Worker
from tests.helpers import wait_until
from tests.integration.test_worker_faults import (
    ONE,
    PAIR_HELD,
    WAIT_S,
    Held,
    SettlementsNoted,
    WorkerThread,
    logged,
    quietly,
    transitions,
)
from tests.tcp_proxy import SilentableProxy

pytestmark = pytest.mark.postgres


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[SilentableProxy]:
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    with SilentableProxy(str(info["host"]), int(info.get("port") or 5432)) as proxy:
        yield proxy


def _through(postgres_url: str, proxy: SilentableProxy) -> str:
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    user, dbname = info.get("user", "postgres"), info["dbname"]
    password = f":{info['password']}" if info.get("password") else ""
    return f"postgresql://{user}{password}@127.0.0.1:{proxy.port}/{dbname}"


@pytest.mark.parametrize("batch", [1, 2])
def test_a_silent_database_costs_an_outcome_write_its_patience_not_the_attempts_own_wait(
    pg_app: FlowForge,
    postgres_url: str,
    proxy: SilentableProxy,
    caplog: pytest.LogCaptureFixture,
    batch: int,
) -> None:
    held, channel = Held(), SettlementsNoted()
    run_id = pg_app.start_workflow_run(PAIR_HELD if batch == 2 else ONE)
    tasks = {task.task_key: task.id for task in pg_app.task_runs(run_id)}
    assert pg_app.publish_pending_dispatches(channel.publisher()) == batch
    worker_app = FlowForge(_through(postgres_url, proxy))
    worker = WorkerThread(
        Worker(
            worker_app,
            lambda: channel.consumer(prefetch=batch),
            registry=held.registry,
            worker_id="w-patience",
            outcome_patience=0.2,
            batch=batch,
        )
    )
    try:
        assert held.started.wait(WAIT_S)
        proxy.silence()  # the claim is written; the outcomes will get no answer
        held.release.set()
        wait_until(
            lambda: all(channel.actions(task) for task in tasks.values()),
            WAIT_S,
            "the outcome write waited for its attempt, past its patience",
        )
        # Given up while the database is still silent: requeued, never acked, kept.
        assert {key: channel.actions(task)[0] for key, task in tasks.items()} == dict.fromkeys(
            tasks, "requeue"
        )
        assert logged(caplog, "outcome not written; kept for the redelivery")
        proxy.resume()
        wait_until(
            quietly(lambda: {t.state for t in pg_app.task_runs(run_id)} == {"succeeded"}),
            WAIT_S,
            "the outcomes were never written",
        )
        wait_until(
            lambda: channel.unsettled_count == channel.ready_count == 0,
            WAIT_S,
            "the redeliveries were never acked",
        )
    finally:
        proxy.resume()
        held.release.set()
        worker.stop()
        worker_app.close()
    assert held.calls == dict.fromkeys(tasks, 1)  # written, never run again
    for key, task in tasks.items():
        assert transitions(pg_app, task) == ["create", "claim", "succeed"], key
    assert channel.dead_letters == []
