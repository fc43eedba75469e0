"""What capturing a handler's output costs a worker's task (issue #49), side by side.

    python -m bench.attempt_logs_cost                # 5 reps x 4 variants, 1,000 tasks each
    python -m bench.attempt_logs_cost --reps 7 --tasks 2000

A task is what a worker does with one delivery (``Worker.handle``: claim, run the
handler on its lane, finish, record the output, ack), one process, PostgreSQL, the
in-process dispatch channel (no broker: what is measured is the worker's own work), on
one-task runs created and published beforehand, after 50 untimed tasks. Four variants,
each rep in a fresh process and database, interleaved (ABCD, then DCBA on odd reps):

* ``before_quiet`` / ``before_loud``: the capture switched off (``capture.install`` and
  ``capture.capturing`` made no-ops): FlowForge as it was before issue #49, the lines
  going to the process's streams (here /dev/null, INFO and up);
* ``after_quiet`` / ``after_loud``: FlowForge as it is.

``quiet``: the handler returns at once, printing and logging nothing. ``loud``: it
writes 100 lines, 50 ``print`` and 50 ``logging.info`` (about 6 KB), then returns.

Reports, per variant, the median client CPU (``process_time``), this database's
backends' CPU and wall time per task, and the ratios after / before. Nothing asserts a
time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import process_seconds
from bench.end_to_end import ROOT, database_url, drop_database, recreate_database
from bench.report import emit

DATABASE = os.environ.get("FLOWFORGE_BENCH_LOGS_DATABASE", "flowforge_bench_attempt_logs")
WARM_UP = 50
VARIANTS = ("before_quiet", "after_quiet", "before_loud", "after_loud")
LINES = 100


def _capture_off() -> None:
    """FlowForge before issue #49: no proxies, no records' handler, nothing kept."""
    from flowforge.processes import capture

    @contextlib.contextmanager
    def not_capturing(output: Any) -> Iterator[Any]:
        yield output

    capture.install = lambda: None
    capture.capturing = not_capturing


def child(variant: str, tasks: int) -> dict[str, float]:
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the process's streams until it exits
    sys.stdout = devnull
    handler = logging.StreamHandler(devnull)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("flowforge").setLevel(logging.WARNING)  # the worker's own lines
    if variant.startswith("before"):
        _capture_off()
    from flowforge import FlowForge
    from flowforge.processes.registry import TaskRegistry
    from flowforge.processes.transport import InMemoryDispatchChannel
    from flowforge.processes.worker import Worker

    log = logging.getLogger("bench.handler")
    registry = TaskRegistry()

    @registry.task("quiet")
    def quiet(ctx: Any) -> None:
        return None

    @registry.task("loud")
    def loud(ctx: Any) -> None:
        for i in range(LINES // 2):
            print(f"line {i} of task {ctx.task_key}: some words a handler prints")
            log.info("record %d of task %s: some words a handler logs", i, ctx.task_key)

    task_type = variant.split("_")[1]
    recreate_database(DATABASE)
    app = FlowForge(database_url(DATABASE), migrate=True)
    try:
        definition = {"name": "bench_logs", "tasks": [{"key": "t", "type": task_type}]}
        for _ in range(tasks + WARM_UP):
            app.start_workflow_run(definition)
        channel = InMemoryDispatchChannel()
        while app.publish_pending_dispatches(channel.publisher()):
            pass
        worker = Worker(app, channel.consumer, registry=registry, worker_id="bench")
        consumer = channel.consumer()

        def one() -> None:
            delivery = consumer.get(1.0)
            assert delivery is not None
            assert worker.handle(delivery, consumer) == "succeed"

        for _ in range(WARM_UP):
            one()
        backends = _backends_of()
        server = sum(process_seconds(pid) for pid in backends)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(tasks):
            one()
        result = {
            "cpu_us": (time.process_time() - cpu) / tasks * 1e6,
            "wall_us": (time.perf_counter() - wall) / tasks * 1e6,
            "server_cpu_us": (sum(process_seconds(pid) for pid in backends) - server)
            / tasks
            * 1e6,
        }
        consumer.close()
        return result
    finally:
        app.close()
        drop_database(DATABASE)


def _backends_of() -> list[int]:
    """This database's server processes: their CPU is what the tasks cost PostgreSQL."""
    with psycopg.connect(database_url(DATABASE), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    if options.child:
        measured = child(options.child, options.tasks)
        sys.__stdout__.write(json.dumps(measured) + "\n")  # type: ignore[union-attr]
        return
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for rep in range(options.reps):
        for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:  # interleaved
            argv = [sys.executable, "-m", "bench.attempt_logs_cost", "--child", variant]
            done = subprocess.run(
                [*argv, "--tasks", str(options.tasks)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            runs[variant].append(json.loads(done.stdout.splitlines()[-1]))
    result: dict[str, Any] = {"tasks": options.tasks, "reps": options.reps}
    for variant in VARIANTS:
        for key in ("cpu_us", "server_cpu_us", "wall_us"):
            result[f"{variant}_{key}"] = statistics.median(r[key] for r in runs[variant])
    for shape in ("quiet", "loud"):
        for key in ("cpu_us", "server_cpu_us", "wall_us"):
            ratio = result[f"after_{shape}_{key}"] / result[f"before_{shape}_{key}"]
            result[f"{shape}_after_over_before_{key}"] = ratio
    result["load_average"] = os.getloadavg()[0]
    emit(result, options.out)


if __name__ == "__main__":
    main()
