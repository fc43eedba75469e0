"""The redispatch net under a deep backlog (issue #44): how many duplicate dispatches a
backlog of N ready tasks gets while it waits with no worker and then drains.

    python -m bench.backlog_redispatch                      # 50,000 tasks, 4 workers
    python -m bench.backlog_redispatch --n 2000 --workers 2 --wait 6 --redispatch-after 2

Run on demand, not in CI. Real processes (``python -m flowforge scheduler|publisher|
worker``) on a fresh PostgreSQL database and a RabbitMQ topology of its own, both removed
at the end. One run of N independent no-op tasks is submitted with the scheduler (its
period shortened with ``--redispatch-after``) and the publisher running and no worker;
once every dispatch is published the backlog waits ``--wait`` seconds (several periods:
the old net gave every task a new dispatch each period), then the workers drain it.
Reported: outbox rows and redispatches (and their share of N: the bound is 2 %), the
drain time and how many periods it spanned. Checked: every task succeeded once.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import pika
import psycopg

from bench.end_to_end import (
    BROKER_URL,
    DEADLINE_S,
    HANDLERS,
    ROOT,
    Processes,
    Topology,
    database_url,
    drop_database,
    recreate_database,
)
from flowforge import FlowForge

DATABASE = os.environ.get("FLOWFORGE_BENCH_BACKLOG_DATABASE", "flowforge_bench_backlog")


def count(url: str, sql: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def wait_for(url: str, sql: str, target: int, processes: Processes) -> float:
    """Seconds until ``sql`` counts ``target``."""
    started = time.monotonic()
    while count(url, sql) < target:
        processes.check_alive()
        if time.monotonic() - started > DEADLINE_S:
            raise RuntimeError(f"stuck: {sql} < {target}")
        time.sleep(0.5)
    return time.monotonic() - started


def measure(n: int, workers: int, wait_s: float, period_s: float) -> dict[str, Any]:
    url = database_url(DATABASE)
    recreate_database(DATABASE)
    topology = Topology()
    environment = {
        **os.environ,
        "FLOWFORGE_DATABASE_URL": url,
        "FLOWFORGE_BROKER_URL": BROKER_URL,
        "PYTHONPATH": str(ROOT),
        **topology.environment(),
    }
    app = FlowForge(url, migrate=True)
    processes = Processes(environment)
    try:
        processes.start("scheduler", "scheduler", "--redispatch-after", str(period_s))
        processes.start("publisher", "publisher")
        tasks = [{"key": f"t{i}", "type": "noop"} for i in range(n)]
        app.start_workflow_run({"name": "bench_backlog", "tasks": tasks})
        published_sql = "SELECT count(*) FROM dispatch_outbox WHERE published_at IS NOT NULL"
        publish_s = wait_for(url, published_sql, n, processes)
        time.sleep(wait_s)
        waited_rows = count(url, "SELECT count(*) FROM dispatch_outbox")
        for index in range(workers):
            processes.start(f"worker-{index}", "worker", "--tasks", HANDLERS)
        succeeded = "SELECT count(*) FROM task_runs WHERE state = 'succeeded'"
        drain_s = wait_for(url, succeeded, n, processes)
        rows = count(url, "SELECT count(*) FROM dispatch_outbox")
        redispatched = count(url, "SELECT count(reason) FROM dispatch_outbox")
        claims = count(url, "SELECT count(*) FROM task_runs WHERE fencing_token > 1")
    finally:
        processes.stop()
        app.close()
        _delete_topology(topology)
        drop_database(DATABASE)
    return {
        "n": n,
        "workers": workers,
        "redispatch_after_s": period_s,
        "publish_s": round(publish_s, 1),
        "waited_s": wait_s,
        "outbox_rows_after_wait": waited_rows,
        "drain_s": round(drain_s, 1),
        "periods_waited_and_drained": round((wait_s + drain_s) / period_s, 1),
        "outbox_rows": rows,
        "redispatched": redispatched,
        "duplicates_pct": round(100 * (rows - n) / n, 2),
        "tasks_claimed_more_than_once": claims,
    }


def _delete_topology(topology: Topology) -> None:
    topology.delete(BROKER_URL)
    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    try:
        channel = connection.channel()
        channel.queue_delete(f"{topology.environment()['FLOWFORGE_DISPATCH_QUEUE']}.noop")
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--wait", type=float, default=60.0, help="seconds with no worker")
    parser.add_argument("--redispatch-after", type=float, default=10.0)
    parser.add_argument("--out", help="also write the result as JSON here")
    args = parser.parse_args()
    result = measure(args.n, args.workers, args.wait, args.redispatch_after)
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
