"""What the concurrency limits and time-outs cost a claim+finish cycle when none is set.

    python -m bench.feature_cost                     # 5 reps x 2 variants, 1,500 cycles each
    python -m bench.feature_cost --reps 7 --cycles 2000

A cycle is what a worker does per task (``claim_task_run`` then ``finish_task_run(...,
"succeed")``, one process, PostgreSQL, on a wide run's independent tasks created
beforehand, after 50 untimed cycles), measured in three variants, each rep in a fresh
process and database, the variants interleaved (ABAB..., then BABA... on odd reps):

* ``shipped``: FlowForge as it is;
* ``bare``: the same with what limits and time-outs add to a cycle when none is set
  taken out: the claim's two ``NOT EXISTS`` probes of the counter tables, the claim's
  deadline (``deadline_at``), and the finish's ``release_held_dispatches`` statement;
* ``no_release``: only the finish's ``release_held_dispatches`` taken out.

The ``bare`` variant is not correct FlowForge (a limit set meanwhile would be ignored):
it exists to measure what the features cost. Reports, per variant, the median client
CPU (``process_time``), the server CPU of this database's own backends (``/proc``:
robust on a loaded machine, where wall time is not) and wall time per cycle, and the
ratios bare / shipped. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import psycopg

from bench.cpu import process_seconds
from bench.end_to_end import ROOT, database_url, drop_database, recreate_database
from bench.report import emit

DATABASE = os.environ.get("FLOWFORGE_BENCH_FEATURE_DATABASE", "flowforge_bench_feature")
WARM_UP = 50
VARIANTS = ("shipped", "bare", "no_release")
_PROBES = (
    "  AND NOT EXISTS (SELECT 1 FROM task_type_limits WHERE task_type = task_runs.task_type)\n"
    "  AND NOT EXISTS (SELECT 1 FROM run_limits WHERE workflow_run_id = task_runs.workflow_run_id)"
)


def _bare_statements(*, claims: bool = True) -> None:
    """Patch the loaded statements (before any is prepared; ``claims``: the claim's) and
    the finish's releases."""
    from flowforge.projections import statements
    from flowforge.projections.writes import leaves

    shipped = statements.load("postgres")

    def without(text: str) -> str:
        text = text.replace(_PROBES, "")
        lines = text.splitlines()
        return "\n".join(line for line in lines if not line.lstrip().startswith("deadline_at ="))

    bare: Mapping[str, str] = MappingProxyType(
        {
            name: without(text) if claims and name.startswith("task_claim") else text
            for name, text in shipped.items()
        }
    )
    changed = [name for name in bare if bare[name] != shipped[name]]
    if claims and "task_claim_recorded" not in changed:
        raise RuntimeError("the claim's probes were not found: update this bench")

    def load(dialect: str) -> Mapping[str, str]:
        return bare if dialect == "postgres" else statements.load.__wrapped__(dialect)

    statements.load = load  # type: ignore[assignment]
    leaves._frees = lambda successes: []


def child(variant: str, cycles: int) -> dict[str, float]:
    if variant != "shipped":
        _bare_statements(claims=variant == "bare")
    from flowforge import FlowForge

    recreate_database(DATABASE)
    app = FlowForge(database_url(DATABASE), migrate=True)
    try:
        width = cycles + WARM_UP
        tasks = [{"key": f"t{i}", "type": "noop"} for i in range(width)]
        run_id = app.start_workflow_run({"name": "bench_feature_cost", "tasks": tasks})
        ids = [task.id for task in app.task_runs(run_id)]

        def cycle(task_run_id: Any) -> None:
            claim = app.claim_task_run(task_run_id, "bench")
            assert claim is not None
            assert app.finish_task_run(task_run_id, claim.fencing_token, "succeed")

        for task_run_id in ids[:WARM_UP]:
            cycle(task_run_id)
        backends = _backends()
        server = sum(process_seconds(pid) for pid in backends)
        cpu, wall = time.process_time(), time.perf_counter()
        for task_run_id in ids[WARM_UP:]:
            cycle(task_run_id)
        return {
            "cpu_us": (time.process_time() - cpu) / cycles * 1e6,
            "wall_us": (time.perf_counter() - wall) / cycles * 1e6,
            "server_cpu_us": (sum(process_seconds(pid) for pid in backends) - server)
            / cycles
            * 1e6,
        }
    finally:
        app.close()
        drop_database(DATABASE)


def _backends() -> list[int]:
    """The server processes of this database's connections (the app's pool and the
    notifier): their CPU is what the cycles cost PostgreSQL, whatever else runs."""
    with psycopg.connect(database_url(DATABASE), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1500)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.child, options.cycles)))
        return
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for rep in range(options.reps):
        for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:  # interleaved
            argv = [sys.executable, "-m", "bench.feature_cost", "--child", variant]
            done = subprocess.run(
                [*argv, "--cycles", str(options.cycles)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            runs[variant].append(json.loads(done.stdout.splitlines()[-1]))
    result: dict[str, Any] = {"cycles": options.cycles, "reps": options.reps}
    for variant in VARIANTS:
        for key in ("cpu_us", "server_cpu_us", "wall_us"):
            result[f"{variant}_{key}"] = statistics.median(r[key] for r in runs[variant])
    for variant in VARIANTS[1:]:
        for key in ("cpu_us", "server_cpu_us", "wall_us"):
            ratio = result[f"{variant}_{key}"] / result[f"shipped_{key}"]
            result[f"{variant}_over_shipped_{key}"] = ratio
    result["load_average"] = os.getloadavg()[0]
    emit(result, options.out)


if __name__ == "__main__":
    main()
