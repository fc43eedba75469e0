"""Bounded history's speeds (docs/performance.md, "Archive, restore and rebuild"):
``db archive``, ``db restore`` and ``db rebuild`` in events per second, and the sizes
docs/operations.md's growth model is made of (bytes per event in the live database and
in an archive file).

The workload: ``--runs`` runs of ``--tasks`` independent tasks each, every task claimed
and finished (``--outcome``: a task's three events, created, claimed, succeeded, as a
fan-out's), in a fresh database (``flowforge_bench_archive`` on the PostgreSQL server
of ``--admin-url``, or a SQLite file with ``--sqlite``). Then, timed, each once:
archive every run, restore the file, rebuild the tables from the log and verify every
row. The machine is shared: absolute rates are noisy, and say so where quoted.

    python -m bench.archive --runs 1000 --tasks 20
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from flowforge.app.service import FlowForge
from flowforge.app.task_run_commands import Finish
from flowforge.cli import db

BENCH_DATABASE = "flowforge_bench_archive"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Tasks claimed and finished per transaction while the workload is made.
BATCH = 500


def fan_out(tasks: int) -> dict[str, Any]:
    return {
        "name": "bench_fan_out",
        "tasks": [{"key": f"t{n}", "type": "work"} for n in range(tasks)],
    }


def workload(app: FlowForge, runs: int, tasks: int) -> None:
    """``runs`` succeeded runs of ``tasks`` tasks, claimed and finished in batches (the
    batched worker's path: one transaction per batch)."""
    ids = app.start_workflow_runs(fan_out(tasks), [{"n": n} for n in range(runs)])
    for run in ids:
        app.advance_workflow_run(run)
    ready = [task.id for run in ids for task in app.task_runs(run)]
    for start in range(0, len(ready), BATCH):
        claimed, _ = app.claim_task_runs_and_their_runs(ready[start : start + BATCH], "bench")
        finishes = [
            Finish(row.id, row.fencing_token, "succeed", result={"n": 1})
            for row in claimed
            if row is not None
        ]
        assert all(app.finish_task_runs(finishes))
    app.advance_woken_runs()


def measure(app: FlowForge, folder: Path, empty_bytes: int) -> dict[str, Any]:
    """Time an archive, a restore and a rebuild with its verification, each once.
    ``empty_bytes``: the database's size before the workload, so that the bytes per
    event are what the workload added (rows, events, indexes), not the empty schema."""
    stats = app.database_stats()
    events = stats.events
    file = folder / "bench.ffarchive"
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}

    @contextmanager
    def timed(step: str) -> Iterator[None]:
        wall, client = time.perf_counter(), time.process_time()
        yield
        seconds[step] = time.perf_counter() - wall
        cpu[step] = time.process_time() - client

    with timed("archive"):
        archived = app.archive_runs(file, older_than=timedelta(0))
    assert archived.archived_events == events, (archived, events)
    with timed("restore"):
        restored = app.restore_runs(file)
    assert restored.restored_events == events
    with timed("rebuild"):
        report = app.rebuild_projections()
    with timed("verify"):
        checked, problems = db.verify(app)
    assert not problems, problems[:5]
    assert report.events == events
    archive_s, restore_s, rebuild_s, verify_s = (
        seconds[s] for s in ("archive", "restore", "rebuild", "verify")
    )
    return {
        "dialect": app.database.dialect,
        "events": events,
        "task_runs": stats.rows["task_runs"],
        "events_per_task": round(stats.events_per_task, 3),
        "event_bytes_per_event": round(stats.bytes_per_event, 1),
        "database_bytes_per_event": round((stats.database_bytes - empty_bytes) / events, 1),
        "archive_file_bytes": file.stat().st_size,
        "archive_bytes_per_event": round(file.stat().st_size / events, 1),
        "archive_events_per_s": round(events / archive_s),
        "restore_events_per_s": round(events / restore_s),
        "rebuild_events_per_s": round(events / rebuild_s),
        "verify_rows_per_s": round(checked / verify_s),
        "rebuild_and_verify_events_per_s": round(events / (rebuild_s + verify_s)),
        "seconds": {step: round(value, 2) for step, value in seconds.items()},
        # This client's CPU (the database server's is not counted): what a busy machine
        # does not stretch.
        "client_cpu_seconds": {step: round(value, 2) for step, value in cpu.items()},
    }


@contextmanager
def database(args: argparse.Namespace, folder: Path) -> Iterator[str]:
    if args.sqlite:
        yield f"sqlite:///{folder / 'bench.db'}"
        return
    name = sql.Identifier(BENCH_DATABASE)
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    try:
        yield args.admin_url.rsplit("/", 1)[0] + f"/{BENCH_DATABASE}"
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.archive", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--sqlite", action="store_true", help="on a SQLite file")
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch, database(args, Path(scratch)) as url:
        FlowForge(url, migrate=True).close()
        with FlowForge(url) as app:
            empty = app.database_stats().database_bytes
            started = time.perf_counter()
            workload(app, args.runs, args.tasks)
            made = time.perf_counter() - started
            result = measure(app, Path(scratch), empty)
    print(
        json.dumps(
            {"runs": args.runs, "tasks": args.tasks, "workload_s": round(made, 1), **result}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
