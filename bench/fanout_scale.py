"""Scale: a wide fan-out's dependants made ready, and runs created in bulk.

    python -m bench.fanout_scale                      # --width 50000 --runs 20000
    python -m bench.fanout_scale --width 10000 --runs 5000 --reps 3

* **fan-out**: one run of a root task and ``--width`` tasks that depend on it, created
  (one ``start_workflow_run``: reported as tasks created per second); the root claimed
  and succeeded as a worker does it (``claim_task_run_and_its_run``, the run's
  definition parsed into the service's cache, then ``finish_task_run``: the finish
  advances the run in its own transaction, or marks it for a scheduler); then the wall
  time from the finish call until every dependant is seen ready (probed every 50 ms;
  each with its dispatch in the outbox, checked), and the finish call's own.
* **bulk start**: ``start_workflow_runs`` of ``--runs`` one-task runs in one call:
  runs/s.

Each rep on a fresh database (``flowforge_bench_fanout``, or
``FLOWFORGE_BENCH_FANOUT_DATABASE``). Nothing asserts a time; the only checks are that
every dependant became ready once and has one dispatch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.end_to_end import (
    ONE_TASK,
    Probe,
    database_url,
    drop_database,
    recreate_database,
)
from bench.report import emit
from flowforge import FlowForge, load_definition

DATABASE = os.environ.get("FLOWFORGE_BENCH_FANOUT_DATABASE", "flowforge_bench_fanout")


def _fresh() -> tuple[FlowForge, Probe]:
    recreate_database(DATABASE)
    url = database_url(DATABASE)
    app = FlowForge(url, migrate=True)
    return app, Probe(url)


def fanout(width: int) -> dict[str, Any]:
    app, probe = _fresh()
    try:
        tasks: list[dict[str, Any]] = [{"key": "root", "type": "noop"}]
        tasks += [{"key": f"t{i}", "type": "noop", "depends_on": ["root"]} for i in range(width)]
        started = time.perf_counter()
        run_id = app.start_workflow_run({"name": "bench_fanout_scale", "tasks": tasks})
        created = time.perf_counter() - started
        return {
            "width": width,
            "created_tasks_per_s": (width + 1) / created,
            **finish_root(app, probe, run_id, width),
        }
    finally:
        app.close()
        probe.close()
        drop_database(DATABASE)


def finish_root(
    app: FlowForge, probe: Probe, run_id: object, width: int, result: Any = None
) -> dict[str, float]:
    """Claim and succeed the run's ``root`` (with ``result``) as a worker does, then wait
    until ``width`` tasks of the run are ready, each with its dispatch: the finish call's
    time and the time until the last is ready, from the finish call."""
    (root_id,) = probe.one(
        f"SELECT id FROM task_runs WHERE workflow_run_id = '{run_id}' AND task_key = 'root'"
    )
    # As a worker claims: the run read with the claim and its definition parsed
    # into the service's cache then (processes/run_cache.py), not at the finish.
    claimed, run = app.claim_task_run_and_its_run(root_id, "bench")
    assert claimed is not None
    assert run is not None
    app.definitions.of(run)
    started = time.perf_counter()
    assert app.finish_task_run(root_id, claimed.fencing_token, "succeed", result)
    finish_call = time.perf_counter() - started
    _wait_ready(probe, run_id, width)
    seconds = time.perf_counter() - started
    (dispatches,) = probe.one("SELECT count(*) FROM dispatch_outbox")
    assert dispatches == width + 1, dispatches  # and the root's
    return {"finish_call_s": finish_call, "all_ready_after_upstream_s": seconds}


def _wait_ready(probe: Probe, run_id: object, width: int) -> None:
    deadline = time.monotonic() + 600
    sql = f"SELECT count(*) FROM task_runs WHERE workflow_run_id = '{run_id}' AND state = 'ready'"
    while probe.one(sql)[0] < width:
        if time.monotonic() > deadline:
            raise TimeoutError("the fan-out's tasks did not all become ready")
        time.sleep(0.05)


def bulk_start(runs: int) -> dict[str, Any]:
    app, probe = _fresh()
    try:
        definition = load_definition(ONE_TASK)
        inputs = [{"i": i} for i in range(runs)]
        started = time.perf_counter()
        ids = app.start_workflow_runs(definition, inputs)
        seconds = time.perf_counter() - started
        assert len(ids) == runs
        return {"runs": runs, "runs_per_s": runs / seconds}
    finally:
        app.close()
        probe.close()
        drop_database(DATABASE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", choices=["fanout", "bulk"])
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    result: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    if options.only != "bulk":
        reps = [fanout(options.width) for _ in range(options.reps)]
        for key in ("created_tasks_per_s", "finish_call_s", "all_ready_after_upstream_s"):
            result[key] = statistics.median(rep[key] for rep in reps)
        result["width"] = options.width
    if options.only != "fanout":
        bulk = [bulk_start(options.runs) for _ in range(options.reps)]
        result["bulk_start_runs_per_s"] = statistics.median(b["runs_per_s"] for b in bulk)
        result["runs"] = options.runs
    emit(result, options.out)


if __name__ == "__main__":
    main()
