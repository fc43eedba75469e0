"""Every page of the web UI for a large run against a 10-task run (docs/ui.md, "Large
runs"; docs/performance.md).

    python -m bench.ui_large_run [--tasks 50000] [--reps 3] [--sqlite]

On a fresh PostgreSQL database (``bench_ui``; ``--sqlite``: a SQLite file), for a run
of N tasks and one of 10 of the same shape (a root, N - 2 tasks after it, and one after
them all), claims and finishes the root and a tenth of the middle tasks, one by one
through ``claim_task_run`` and ``finish_task_run`` as workers do (each finish into the
wide fan-in costs its own: ``app/fan_in.py``), so the pages show several states and a
timeline. Then fetches each page in-process (Starlette's TestClient: the server's own
time, no network): the run's page once cold (a UI process's first view of the run
computes its shape, ``ui/shapes.py``) and ``--reps`` times warm; the run's page as of
three past moments (just after its creation: every task changed since; once the root
finished: a tenth changed since; its end: none); the live patch (``tasks.json``, with
the end as its cursor), the
runs page, the workflow's grid and a task's page (the fan-in's end, and a finished
task). Prints each page's median and size for both runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from uuid import UUID

from starlette.testclient import TestClient

from bench.end_to_end import database_url, drop_database, recreate_database
from flowforge import timefmt
from flowforge.app.service import FlowForge
from flowforge.ui.web import create_app

DATABASE = "bench_ui"


def wide_run(n: int, name: str = "wide") -> dict[str, object]:
    middle = [f"t{i}" for i in range(n - 2)]
    tasks: list[dict[str, object]] = [{"key": "root", "type": "work"}]
    tasks += [{"key": key, "type": "work", "depends_on": ["root"]} for key in middle]
    tasks.append({"key": "end", "type": "work", "depends_on": middle})
    return {"name": name, "tasks": tasks}


def finish(app: FlowForge, task_run_id: UUID) -> None:
    claim = app.claim_task_run(task_run_id, "bench", 30)
    assert claim is not None
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed", {"ok": 1})


def timed(client: TestClient, url: str, reps: int, params: dict[str, str] | None = None) -> float:
    seconds = []
    for _ in range(reps):
        began = time.perf_counter()
        page = client.get(url, params=params)
        seconds.append(time.perf_counter() - began)
        assert page.status_code == 200, page.text[:200]
    return statistics.median(seconds)


def build(app: FlowForge, n: int) -> dict[str, str]:
    """A run of ``n`` tasks with a tenth of them finished; its pages' URLs and moments."""
    began = time.perf_counter()
    run_id = app.start_workflow_run(wide_run(n, f"wide{n}"))
    created = timefmt.iso(app.database_now())
    rows = {t.task_key: t.id for t in app.task_runs(run_id)}
    finish(app, rows["root"])
    app.schedule_once()
    mid = timefmt.iso(app.database_now())
    for i in range(0, n - 2, 10):
        finish(app, rows[f"t{i}"])
    print(f"built a run of {n:,} tasks in {time.perf_counter() - began:.1f}s", flush=True)
    return {
        "run": f"/runs/{run_id}",
        "created": created,
        "mid": mid,
        "end": timefmt.iso(app.database_now()),
        "grid": f"/workflows/wide{n}",
        "end_task": f"/tasks/{rows['end']}",
        "done_task": f"/tasks/{rows['t0']}",
    }


def pages(client: TestClient, run: dict[str, str], reps: int) -> dict[str, tuple[float, int]]:
    """Each page's median time and size."""
    found: dict[str, tuple[float, int]] = {}

    def page(name: str, url: str, params: dict[str, str] | None = None, n: int = reps) -> None:
        seconds = timed(client, url, n, params)
        found[name] = (seconds, len(client.get(url, params=params).content))

    page("run page, first view", run["run"], n=1)
    page("run page", run["run"])
    page("as of its end (none changed since)", run["run"], {"at": run["end"]})
    page("as of the root's finish (a tenth changed)", run["run"], {"at": run["mid"]})
    page("as of its creation (all changed since)", run["run"], {"at": run["created"]})
    page(
        "live patch (tasks.json, none changed since)",
        run["run"] + "/tasks.json",
        {"since": run["end"]},
    )
    page("runs page", "/")
    page("workflow grid", run["grid"])
    page("task page: the fan-in's end", run["end_task"])
    page("task page: a finished task", run["done_task"])
    return found


@contextmanager
def database(sqlite: bool) -> Iterator[str]:
    if sqlite:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'bench.db'}"
        return
    recreate_database(DATABASE)
    try:
        yield database_url(DATABASE)
    finally:
        drop_database(DATABASE)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_large_run")
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true", help="on a SQLite file")
    args = parser.parse_args(argv)
    with database(args.sqlite) as url, FlowForge(url, migrate=True) as app:
        small, large = build(app, 10), build(app, args.tasks)
        with TestClient(create_app(app, token=None)) as client:
            of_small = pages(client, small, args.reps)
            of_large = pages(client, large, args.reps)
    print(f"{'page':45} {'10 tasks':>18} {f'{args.tasks:,} tasks':>20}")
    for name, (seconds, size) in of_large.items():
        s_seconds, s_size = of_small[name]
        print(
            f"{name:45} {s_seconds * 1000:7.0f} ms {s_size / 1024:6.0f} KB"
            f" {seconds * 1000:9.0f} ms {size / 1024:6.0f} KB"
        )


if __name__ == "__main__":
    main()
