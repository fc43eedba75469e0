"""How long the web UI takes to serve a 10,000-task run's page (docs/ui.md, "Large runs").

    python -m bench.ui_large_run [--tasks 10000] [--reps 5]

Makes a fresh PostgreSQL database (``bench_ui``), starts one run of N tasks (a root, N - 2
tasks after it, and one after them all), claims and finishes the root and a tenth of the
middle tasks (so the page shows several states and a timeline), then fetches the run's
page in-process (Starlette's TestClient: the server's own time, no network) ``--reps``
times now, and as of three past moments (``--reps`` each): just after its creation (every
task changed since), once the root finished (a tenth of the tasks changed since), and
at the end (none changed since); and prints each median and the page's size. The page
now reads the task rows only; as of a moment it replays only the tasks changed since
from their own events (``ui/pages.py``, ``run_state``), so its cost grows with them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from uuid import UUID

from starlette.testclient import TestClient

from bench.end_to_end import database_url, drop_database, recreate_database
from flowforge import timefmt
from flowforge.app.service import FlowForge
from flowforge.ui.web import create_app

DATABASE = "bench_ui"


def wide_run(n: int) -> dict[str, object]:
    middle = [f"t{i}" for i in range(n - 2)]
    tasks: list[dict[str, object]] = [{"key": "root", "type": "work"}]
    tasks += [{"key": key, "type": "work", "depends_on": ["root"]} for key in middle]
    tasks.append({"key": "end", "type": "work", "depends_on": middle})
    return {"name": "wide", "tasks": tasks}


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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_large_run")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    recreate_database(DATABASE)
    try:
        with FlowForge(database_url(DATABASE), migrate=True) as app:
            began = time.perf_counter()
            run_id = app.start_workflow_run(wide_run(args.tasks))
            print(f"started a run of {args.tasks:,} tasks in {time.perf_counter() - began:.1f}s")
            created = timefmt.iso(app.database_now())
            rows = {t.task_key: t.id for t in app.task_runs(run_id)}
            finish(app, rows["root"])
            app.schedule_once()
            mid = timefmt.iso(app.database_now())
            for i in range(0, args.tasks - 2, 10):
                finish(app, rows[f"t{i}"])
            end = timefmt.iso(app.database_now())
            url = f"/runs/{run_id}"
            with TestClient(create_app(app, token=None)) as client:
                size = len(client.get(url).content)
                print(f"the run's page now: median {timed(client, url, args.reps) * 1000:.0f} ms")
                print(f"  {size:,} bytes")
                for name, at in (
                    ("at the end (no task changed since)", end),
                    ("once the root finished (a tenth changed since)", mid),
                    ("just after its creation (every task changed since)", created),
                ):
                    seconds = timed(client, url, args.reps, {"at": at})
                    size = len(client.get(url, params={"at": at}).content)
                    print(f"as of {name}: median {seconds * 1000:.0f} ms, {size:,} bytes")
    finally:
        drop_database(DATABASE)


if __name__ == "__main__":
    main()
