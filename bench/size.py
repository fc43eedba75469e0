"""Every read command at the size of a real run (issue #50): a big run beside a small one.

    python -m bench.size [--tasks 50000] [--small 10] [--reps 5] [--backend postgres sqlite]

For each backend, builds two finished runs of the same shape (N - 1 independent tasks,
one after ten of them), through the service in batches (``claim_task_runs_and_their_runs``
and ``finish_task_runs``, as a batching worker does): a big one of ``--tasks`` tasks and
a small one of ``--small``. Then times, in-process, what each read command reads and
prints (the CLI's own functions, stdout to /dev/null), on each run: ``status`` (the
default summary), ``why RUN/<middle task>``, ``why RUN/end``, ``history`` to its first
line and to its end, ``history --json`` to its end, and ``history --task``. Prints the
median of ``--reps`` for each, and the big run's time over the small one's. Nothing
asserts a time: the machine is shared (docs/performance.md, "The machine").

PostgreSQL: a fresh database ``bench_size`` (dropped at the end, ``--keep`` keeps it, and
``--reuse`` times the runs a kept one holds without building them again);
SQLite: a temporary file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from uuid import UUID

import psycopg

from bench.end_to_end import database_url, drop_database, recreate_database
from flowforge.app.service import FlowForge
from flowforge.app.task_run_commands import Finish
from flowforge.bounds import MAX_BATCH
from flowforge.cli.main import main as cli_main

DATABASE = "bench_size"


#: How many of the wide tasks ``end`` depends on. Not all of them: a finish of a task
#: that others depend on advances its run in a transaction of its own (a 2,000-task
#: fan-in took 214 s to build), and a root before them all made one advance promote
#: every task at once (50,000: minutes); the leaves' successes go in batches.
END_DEPENDS_ON = 10


def wide_run(n: int) -> dict[str, object]:
    """``n - 1`` independent tasks, and one task after the first ten of them."""
    middle = [f"process{i}" for i in range(n - 1)]
    tasks: list[dict[str, object]] = [{"key": key, "type": "work"} for key in middle]
    tasks.append({"key": "end", "type": "work", "depends_on": middle[:END_DEPENDS_ON]})
    return {"name": "wide", "tasks": tasks}


def _run_batch(app: FlowForge, ids: Sequence[UUID]) -> None:
    claimed, _ = app.claim_task_runs_and_their_runs(ids, "bench")
    finishes = [Finish(c.id, c.fencing_token, "succeed", {"ok": 1}) for c in claimed if c]
    assert all(app.finish_task_runs(finishes)), "a finish was refused"


def build(app: FlowForge, n: int) -> UUID:
    """A finished run of ``n`` tasks (every one succeeded), through the service."""
    run_id = app.start_workflow_run(wide_run(n))
    rows = {t.task_key: t.id for t in app.task_runs(run_id)}
    middle = [rows[f"process{i}"] for i in range(n - 1)]
    for start in range(0, len(middle), MAX_BATCH):
        _run_batch(app, middle[start : start + MAX_BATCH])
    app.schedule_once()
    _run_batch(app, [rows["end"]])
    app.schedule_once()
    state = app.get_workflow_run(run_id).state
    assert state == "succeeded", f"the bench's run ended {state}"
    return run_id


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


class _FirstLine(io.StringIO):
    """Stdout that notes when its first line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None

    def write(self, s: str) -> int:
        if self.first is None and "\n" in s:
            self.first = time.perf_counter()
        return super().write(s)


def command(url: str, *words: str) -> Callable[[], float]:
    """The CLI command in this process; its time to the end."""

    def run() -> float:
        began = time.perf_counter()
        with _quiet():
            cli_main([*words, "--database-url", url])
        return time.perf_counter() - began

    return run


def first_line(url: str, *words: str) -> Callable[[], float]:
    """The CLI command in this process; its time to its first line of output."""

    def run() -> float:
        out = _FirstLine()
        began = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            cli_main([*words, "--database-url", url])
        return (out.first or time.perf_counter()) - began

    return run


def median(reps: int, measure: Callable[[], float]) -> float:
    measure()  # warm the caches once (imports, prepared statements)
    return statistics.median(measure() for _ in range(reps))


def readings(url: str, run_id: UUID, n: int) -> dict[str, Callable[[], float]]:
    run = str(run_id)
    middle = f"process{(n - 1) // 2}"
    return {
        "status (summary)": command(url, "status", run),
        f"why RUN/{middle}": command(url, "why", f"{run}/{middle}"),
        "why RUN/end": command(url, "why", f"{run}/end"),
        "history: first line": first_line(url, "history", run),
        "history: to its end": command(url, "history", run),
        "history --json: to its end": command(url, "history", run, "--json"),
        f"history --task {middle}": command(url, "history", run, "--task", middle),
        "status --json --limit 100": command(url, "status", run, "--json", "--limit", "100"),
    }


def measure_backend(url: str, tasks: int, small: int, reps: int, *, reuse: bool = False) -> None:
    if reuse:
        big_run, small_run = _built_runs(url, tasks, small)
    else:
        with FlowForge(url, migrate=True) as app:
            began = time.perf_counter()
            big_run = build(app, tasks)
            print(f"  built a run of {tasks:,} tasks in {time.perf_counter() - began:.0f}s")
            small_run = build(app, small)
    if url.startswith("postgresql"):
        # As autovacuum would soon after: without statistics on the new rows the planner
        # sorted a run's 50,000 tasks for a page of 100 instead of walking its index.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
    big, little = readings(url, big_run, tasks), readings(url, small_run, small)
    print(f"  {'command':<28} {small:>7,} tasks {tasks:>9,} tasks   ratio")
    for (name, measure), other in zip(big.items(), little.values(), strict=True):
        b, s = median(reps, measure), median(reps, other)
        print(f"  {name:<28} {s * 1000:>10.0f} ms {b * 1000:>10.0f} ms {b / s:>7.2f}")


def _built_runs(url: str, tasks: int, small: int) -> tuple[UUID, UUID]:
    """The runs of ``tasks`` and ``small`` tasks a ``--keep`` left in the database."""
    with psycopg.connect(url) as conn:
        found: dict[int, UUID] = dict(
            conn.execute(
                "SELECT count(*), workflow_run_id FROM task_runs GROUP BY workflow_run_id"
            ).fetchall()
        )
    return found[tasks], found[small]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.size")
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backend", nargs="+", default=["postgres", "sqlite"])
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database")
    parser.add_argument(
        "--reuse", action="store_true", help="time the runs a --keep left (PostgreSQL)"
    )
    args = parser.parse_args(argv)
    if "postgres" in args.backend:
        print("PostgreSQL")
        if not args.reuse:
            recreate_database(DATABASE)
        try:
            url = database_url(DATABASE)
            measure_backend(url, args.tasks, args.small, args.reps, reuse=args.reuse)
        finally:
            if not args.keep:
                drop_database(DATABASE)
    if "sqlite" in args.backend:
        print("SQLite")
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite:///{Path(directory) / 'size.db'}"
            measure_backend(url, args.tasks, args.small, args.reps)


if __name__ == "__main__":
    main()
