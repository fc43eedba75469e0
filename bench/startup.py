"""Start-up: how long a process takes from its start to its first claim.

    python -m bench.startup                 # 5 reps, one fresh database and topology
    python -m bench.startup --reps 9 --out startup.jsonl

One run is enqueued and published (a publisher process runs throughout), then a worker
process is started and the time from just before its ``Popen`` to the task's
``started_at`` (the claim's time by the database's clock; the database runs on this
machine, so both clocks are the same) is its **start to first claim**. The worker is
stopped and the next rep starts another. Also measured: ``flowforge worker --help`` and
``flowforge --version`` wall time (what the CLI's parser costs to start), and the
worker's CPU seconds by the time it claimed.

Nothing here asserts a time: the figures are printed (JSON with ``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.cpu import process_seconds
from bench.end_to_end import (
    BROKER_URL,
    HANDLERS,
    ONE_TASK,
    ROOT,
    Probe,
    Topology,
    database_url,
    drop_database,
    recreate_database,
)
from bench.report import emit
from flowforge import FlowForge, load_definition

DATABASE = os.environ.get("FLOWFORGE_BENCH_STARTUP_DATABASE", "flowforge_bench_startup")
WAIT_S = 60.0


def _wall(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _wait(probe: Probe, sql: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        (value,) = probe.one(sql)
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(sql)
        time.sleep(0.005)


def _one_rep(app: FlowForge, probe: Probe, env: dict[str, str]) -> dict[str, float]:
    run_id = app.start_workflow_run(load_definition(ONE_TASK), {})
    _wait(
        probe,
        "SELECT min(published_at) FROM dispatch_outbox"
        f" o JOIN task_runs t ON t.id = o.task_run_id WHERE t.workflow_run_id = '{run_id}'",
    )
    started = time.time()
    worker = subprocess.Popen(
        [sys.executable, "-m", "flowforge", "worker", "--tasks", HANDLERS],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        claimed = _wait(
            probe,
            "SELECT extract(epoch FROM started_at) FROM task_runs"
            f" WHERE workflow_run_id = '{run_id}'",
        )
        cpu = process_seconds(worker.pid)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    return {"first_claim_s": float(claimed) - started, "worker_cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--broker-url", default=BROKER_URL)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    recreate_database(DATABASE)
    url = database_url(DATABASE)
    topology = Topology()
    env = dict(
        os.environ,
        FLOWFORGE_DATABASE_URL=url,
        FLOWFORGE_BROKER_URL=options.broker_url,
        PYTHONPATH=str(ROOT),
        **topology.environment(),
    )
    flowforge = [sys.executable, "-m", "flowforge"]
    subprocess.run([*flowforge, "db", "init"], env=env, check=True, stdout=subprocess.DEVNULL)
    publisher = subprocess.Popen(
        [*flowforge, "publisher"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    app, probe = FlowForge(url), Probe(url)
    try:
        helps = [_wall([*flowforge, "worker", "--help"], env) for _ in range(options.reps)]
        versions = [_wall([*flowforge, "--version"], env) for _ in range(options.reps)]
        reps = [_one_rep(app, probe, env) for _ in range(options.reps)]
    finally:
        publisher.terminate()
        publisher.wait(timeout=30)
        app.close()
        probe.close()
        topology.delete(options.broker_url)
        drop_database(DATABASE)
    result = {
        "reps": options.reps,
        "worker_help_s": statistics.median(helps),
        "version_s": statistics.median(versions),
        "first_claim_s": statistics.median(r["first_claim_s"] for r in reps),
        "first_claim_each_s": [round(r["first_claim_s"], 3) for r in reps],
        "worker_cpu_to_first_claim_s": statistics.median(r["worker_cpu_s"] for r in reps),
        "load_average": os.getloadavg()[0],
    }
    emit(result, options.out)


if __name__ == "__main__":
    main()
