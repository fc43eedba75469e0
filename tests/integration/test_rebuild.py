"""The projected tables are a function of the log: rebuilding them gives the same rows.

A random workload (on PostgreSQL, four threads released together by a barrier) claims,
finishes with current and stale fencing tokens, renews, lets tiny leases expire and
reclaims them, retries, advances and cancels runs. Then every row of ``workflow_runs``
and ``task_runs`` is read with plain SQL, the projections are rebuilt from the log, and
every row and column must be identical; a projection corrupted by hand must come back
exactly; every aggregate reconstituted from the log must equal its row; and no command
of the workload may raise (a lost race returns False).

Then targeted tests for what the random workload found or could only find by luck: a
rebuild, or a second scheduler, meeting a scheduler's transaction between its task write
and its run write; and values a user hands in (results, inputs) that the log or the
database does not give back as they went in.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from functools import partial
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.rows import dict_row

from flowforge import errors, timefmt
from flowforge.aggregates import task_run
from flowforge.app import rebuild as rebuild_module
from flowforge.app.service import FlowForge
from flowforge.cli import db
from tests.helpers import one_task, succeed_leaving_a_mark, wait_until

#: The limits' counter rows too: the rebuild recounts them from the rebuilt task rows.
TABLES = ("workflow_runs", "task_runs", "dispatch_outbox", "task_type_limits", "run_limits")
#: A lease that has expired by the next command, and one that never does in a test.
TINY, LONG = 0.001, 3600.0
THREADS = 4
#: A small DAG with a diamond, and retries with no backoff so retried tasks come back.
DEFINITION: dict[str, Any] = {
    "name": "diamond",
    "max_running_tasks": 2,  # concurrency limits: a run's, a task's own, a type's
    "tasks": [
        {"key": "a", "type": "extract"},
        {"key": "b", "type": "transform", "depends_on": ["a"], "max_running": 3},
        {"key": "c", "type": "transform", "depends_on": ["a"]},
        {"key": "d", "type": "load", "depends_on": ["b", "c"]},
    ],
    "retry": {"max_attempts": 3, "backoff_seconds": 0.0, "jitter": 0.0},
}
SINGLE: dict[str, Any] = {
    "name": "single",
    "tasks": [{"key": "only", "type": "work"}],
    "retry": {"max_attempts": 2, "backoff_seconds": 0.001},
}


Rows = dict[str, list[dict[str, Any]]]


class Workload:
    """Random commands against one app, from any number of threads.

    What the threads share (runs, task ids, every fencing token ever issued) only grows,
    so reading it without a lock is safe under the GIL; a thread may use a stale token
    on purpose, and every command may lose a race, which must return False, never raise.
    """

    def __init__(self, app: FlowForge) -> None:
        self.app = app
        self.runs: list[UUID] = []
        self.tasks: list[UUID] = []
        self.tokens: dict[UUID, list[int]] = {}
        self.claims: list[tuple[UUID, int]] = []
        #: Taken to register a run: its tasks may be claimed (found ready) before that.
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.wins: dict[str, int] = {}

    def start_run(self, rng: random.Random) -> bool:
        definition = rng.choice([DEFINITION, DEFINITION, SINGLE])
        inputs: dict[str, object] = {"seed": rng.random()}
        # A few shared keys: threads race to create the same run, and one run results.
        # Some runs are delayed: some start during the workload, some never do.
        start_at = rng.choice([None, None, None, timedelta(seconds=TINY), timedelta(hours=1)])
        # A key names one submission: the same workflow and inputs each time (its
        # start time is not compared: the first one stands).
        shared = rng.choice([None, None, None, rng.randrange(4)])
        key = None if shared is None else f"key-{shared}"
        if shared is not None:
            definition, inputs = (DEFINITION if shared % 2 else SINGLE), {"seed": shared}
        started = self.app.submit_workflow_run(
            definition, inputs, idempotency_key=key, start_at=start_at
        )
        tasks = self.app.task_runs(started.run_id)
        with self.lock:
            if started.run_id not in self.runs:
                self.runs.append(started.run_id)
                for task in tasks:
                    self.tokens.setdefault(task.id, [0])
                    self.tasks.append(task.id)
        return started.created

    def task(self, rng: random.Random) -> UUID:
        if rng.random() < 0.5:
            ready = self.app.ready_task_runs(limit=20)
            if ready:
                return rng.choice(ready).id
        return rng.choice(self.tasks)

    def held(self, rng: random.Random) -> tuple[UUID, int]:
        """A task and a fencing token to write with: mostly a recent claim (whose token
        may have gone stale since), sometimes any task with any token it ever had."""
        if self.claims and rng.random() < 0.8:
            return rng.choice(self.claims[-12:])
        task = rng.choice(self.tasks)
        return task, rng.choice(self.tokens[task])

    def step(self, rng: random.Random) -> None:
        commands = self.commands()
        name, command, _ = rng.choices(commands, weights=[c[2] for c in commands])[0]
        won = command(rng)
        # Counted without a lock: approximate under threads, enough for the guards.
        self.counts[name] = self.counts.get(name, 0) + 1
        if won:
            self.wins[name] = self.wins.get(name, 0) + 1

    def commands(self) -> list[tuple[str, Callable[[random.Random], object], int]]:
        return [
            ("claim", self.claim, 6),
            ("finish", self.finish, 6),
            ("renew", self.renew, 2),
            ("reclaim", lambda rng: self.app.reclaim_task_run(self.held(rng)[0]), 2),
            ("reap", lambda rng: self.app.reap_expired_leases(), 1),
            ("schedule_retry", self.schedule_retry, 1),
            ("retry_ready", lambda rng: self.app.retry_ready(rng.choice(self.tasks)), 1),
            ("move", self.move, 1),
            ("advance", self.advance, 3),
            ("schedule_once", lambda rng: self.app.schedule_once().runs_advanced, 1),
            ("cancel", self.cancel, 1),
            ("start", self.start_run, 2),
        ]

    def claim(self, rng: random.Random) -> bool:
        task = self.task(rng)
        claim = self.app.claim_task_run(task, f"w{rng.randrange(8)}", rng.choice([TINY, LONG]))
        if claim is None:
            return False
        self.tokens.setdefault(task, [0]).append(claim.fencing_token)
        self.claims.append((task, claim.fencing_token))
        return True

    def finish(self, rng: random.Random) -> bool:
        task, token = self.held(rng)
        outcome = rng.choice(["succeed", "succeed", "fail", "fail", "cancel_running"])
        return self.app.finish_task_run(
            task,
            token,
            outcome,
            result={"rows": rng.randrange(100), "path": f"s3://b/{rng.randrange(9)}"},
            error={"type": "RuntimeError", "message": f"boom {rng.randrange(9)}"},
            actor=f"w{rng.randrange(8)}",
        )

    def renew(self, rng: random.Random) -> bool:
        task, token = self.held(rng)
        return self.app.renew_lease(task, token, rng.choice([TINY, LONG]))

    def schedule_retry(self, rng: random.Random) -> bool:
        return self.app.schedule_retry(rng.choice(self.tasks), rng.choice([0.0, TINY, LONG]))

    def move(self, rng: random.Random) -> bool:
        name = rng.choice(["dependencies_satisfied", "cancel_pending", "cancel_ready"])
        return self.app.transition_task_run(rng.choice(self.tasks), name)

    def advance(self, rng: random.Random) -> bool:
        result = self.app.advance_workflow_run(rng.choice(self.runs), rand=rng.random)
        return bool(result.promoted or result.retried or result.made_ready or result.finished_as)

    def cancel(self, rng: random.Random) -> bool:
        if rng.random() < 0.8:  # cancel rarely: a cancelled run stops all its tasks
            return False
        return self.app.cancel_workflow_run(rng.choice(self.runs))


def run_threads(
    workload: Workload, seed: int, steps: int, *extra: Callable[[threading.Barrier], None]
) -> list[BaseException]:
    """``THREADS`` threads of ``steps`` random commands each (plus ``extra`` threads),
    released together. Returns what the threads raised (a thread stops at its first
    exception): the caller checks the rows first, then fails on these."""
    barrier = threading.Barrier(THREADS + len(extra))
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        barrier.wait()
        for _ in range(steps):
            workload.step(rng)

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                failures.append(exc)
                barrier.abort()

        return run

    threads = [
        threading.Thread(target=guarded(partial(worker, i)), name=f"workload-{i}")
        for i in range(THREADS)
    ]
    threads += [
        threading.Thread(target=guarded(partial(fn, barrier)), name="extra") for fn in extra
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), f"{thread.name} is stuck"
    return failures


def assert_no_failures(failures: list[BaseException]) -> None:
    """No command of the workload may raise: a lost race returns False."""
    if failures:
        summary = "; ".join(f"{type(f).__name__}: {f}" for f in failures)
        raise AssertionError(f"{len(failures)} workload thread(s) raised: {summary}") from (
            failures[0]
        )


def prepared_workload(app: FlowForge, seed: int, runs: int = 6) -> Workload:
    workload = Workload(app)
    assert app.set_task_type_limit("extract", 3)
    rng = random.Random(seed)
    while len(workload.runs) < runs:
        workload.start_run(rng)
    return workload


# --- reading the rows with plain SQL -----------------------------------------------------


def postgres_rows(url: str) -> Rows:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in TABLES
        }


def sqlite_rows(url: str) -> Rows:
    path = url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        return {
            table: [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
            for table in TABLES
        }


def differences(before: Rows, after: Rows) -> list[str]:
    """Every row and column that differs, one line each (empty when identical)."""
    found = []
    for table in TABLES:
        old = {row[next(iter(row))]: row for row in before[table]}
        new = {row[next(iter(row))]: row for row in after[table]}
        found += [f"{table} {key}: missing after" for key in old.keys() - new.keys()]
        found += [f"{table} {key}: new after" for key in new.keys() - old.keys()]
        for key in old.keys() & new.keys():
            found += [
                f"{table} {key}.{column}: {old[key][column]!r} -> {new[key].get(column)!r}"
                for column in old[key]
                if old[key][column] != new[key].get(column)
            ]
    return found


def count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def assert_log_agrees_with_rows(app: FlowForge) -> None:
    runs = app.recent_runs(limit=10_000)
    assert runs
    for run in runs:
        snapshot = app.workflow_run_aggregate(run.id).snapshot()
        assert {k: dataclasses.asdict(run)[k] for k in snapshot} == snapshot
        for task in app.task_runs(run.id):
            row = dataclasses.asdict(task)
            snapshot = app.task_run_aggregate(task.id).snapshot()
            assert {k: row[k] for k in snapshot} == snapshot
            assert (task.state == "running") == (task.lease_expires_at is not None)


def assert_the_workload_did_its_job(workload: Workload) -> None:
    """Guard against a workload that passes by doing nothing."""
    for name in ("claim", "finish", "reclaim", "renew"):
        assert workload.wins.get(name, 0) > 0, (name, workload.counts, workload.wins)
    scheduled = workload.wins.get("advance", 0) + workload.wins.get("schedule_once", 0)
    assert scheduled > 0, (workload.counts, workload.wins)
    tasks = [workload.app.get_task_run(t) for t in workload.tasks]
    assert any(t.attempt > 1 for t in tasks), "no task was retried"
    assert any(t.fencing_token > 1 for t in tasks), "no task was claimed twice"
    assert {"succeeded", "cancelled"} <= {t.state for t in tasks}


# --- the tests ---------------------------------------------------------------------------

pg = pytest.mark.postgres


@pg
@pytest.mark.timeout(120)
def test_rebuilding_after_a_random_concurrent_workload_gives_identical_rows(
    pg_app: FlowForge, postgres_url: str
) -> None:
    workload = prepared_workload(pg_app, seed=1)
    failures = run_threads(workload, seed=1, steps=250)

    before = postgres_rows(postgres_url)
    report = pg_app.rebuild_projections()
    after = postgres_rows(postgres_url)

    assert differences(before, after) == []
    assert before == after
    assert report.events == count(postgres_url, "flowforge_events")
    assert report.workflow_runs == len(before["workflow_runs"]) == len(workload.runs)
    assert report.task_runs == len(before["task_runs"]) == len(workload.tasks)
    assert_log_agrees_with_rows(pg_app)
    assert_no_failures(failures)
    assert_the_workload_did_its_job(workload)


@pg
@pytest.mark.timeout(120)
def test_every_aggregate_rebuilt_from_the_log_agrees_with_its_row_after_the_workload(
    pg_app: FlowForge,
) -> None:
    workload = prepared_workload(pg_app, seed=2)
    failures = run_threads(workload, seed=2, steps=150)
    assert_log_agrees_with_rows(pg_app)
    for task in workload.tasks:
        history = pg_app.history(task)
        row = pg_app.get_task_run(task)
        assert [e.version for e in history] == list(range(1, row.version + 1))
        assert history[-1].target == row.state
        assert history[-1].fencing_token == row.fencing_token
    assert_no_failures(failures)


@pg
@pytest.mark.timeout(120)
def test_a_corrupted_projection_is_restored_exactly_by_the_rebuild(
    pg_app: FlowForge, postgres_url: str
) -> None:
    workload = prepared_workload(pg_app, seed=3)
    failures = run_threads(workload, seed=3, steps=100)
    before = postgres_rows(postgres_url)
    tasks = before["task_runs"]
    victim_run = before["workflow_runs"][0]["id"]

    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "UPDATE task_runs SET state = 'cancelled', fencing_token = 999, attempt = 7,"
            " lease_owner = NULL, lease_expires_at = NULL, started_at = now(),"
            " finished_at = now(), retry_due_at = now(), result = '{\"forged\": true}',"
            ' error = \'{"type": "X"}\', version = 1, updated_at = now(),'
            " task_type = 'forged', depends_on = '[\"z\"]', max_attempts = 99 WHERE id = %s",
            (tasks[0]["id"],),
        )
        conn.execute(
            "UPDATE workflow_runs SET state = 'failed', finished_at = now(), version = 99,"
            " inputs = '{}', workflow_name = 'forged' WHERE id <> %s",
            (victim_run,),
        )
        conn.execute("UPDATE task_type_limits SET running = 7, max_running = 1")
        conn.execute("UPDATE run_limits SET running = 2")
        conn.execute("DELETE FROM task_runs WHERE id = %s", (tasks[-1]["id"],))
        conn.execute("DELETE FROM task_runs WHERE workflow_run_id = %s", (victim_run,))
        conn.execute("DELETE FROM workflow_runs WHERE id = %s", (victim_run,))
    assert differences(before, postgres_rows(postgres_url))  # really corrupted

    report = pg_app.rebuild_projections()

    after = postgres_rows(postgres_url)
    assert differences(before, after) == []
    assert before == after
    assert report.workflow_runs == len(before["workflow_runs"])
    assert report.task_runs == len(before["task_runs"])
    assert report.events == count(postgres_url, "flowforge_events")
    assert_no_failures(failures)


@pg
@pytest.mark.timeout(120)
def test_the_rebuild_report_counts_the_events_runs_and_tasks_of_the_log(
    pg_app: FlowForge,
) -> None:
    run = pg_app.start_workflow_run(DEFINITION)
    single = pg_app.start_workflow_run(SINGLE)
    (task,) = pg_app.task_runs(single)
    claim = pg_app.claim_task_run(task.id, "w1", LONG)
    assert claim is not None
    assert pg_app.renew_lease(task.id, claim.fencing_token, LONG)
    # The finish starts and succeeds its run (advance.advance_after_finish).
    assert pg_app.finish_task_run(task.id, claim.fencing_token, "succeed", {"n": 1})
    assert pg_app.get_workflow_run(single).state == "succeeded"
    # Events: 2 runs + 5 tasks created; claim, renew, succeed; single started and succeeded.
    report = pg_app.rebuild_projections()
    assert (report.events, report.workflow_runs, report.task_runs) == (7 + 3 + 2, 2, 5)
    assert pg_app.get_workflow_run(run).state == "pending"
    assert pg_app.get_task_run(task.id).result == {"n": 1}
    # Idempotent: a second rebuild counts the same and changes nothing.
    assert pg_app.rebuild_projections() == report


@pg
def test_a_rebuild_gives_tasks_created_before_leases_were_recorded_their_definitions_lease(
    pg_app: FlowForge, postgres_url: str
) -> None:
    leased = {
        "name": "leased",
        "lease_seconds": 40,
        "tasks": [
            {"key": "own", "type": "t", "lease_seconds": 12.5},
            {"key": "inherits", "type": "t"},
        ],
    }
    run = pg_app.start_workflow_run(leased)
    with psycopg.connect(postgres_url) as conn:
        # The creation events as a FlowForge before schema version 5 stored them.
        forgotten = conn.execute(
            "UPDATE flowforge_events SET state = convert_to("
            " (convert_from(state, 'UTF8')::jsonb - 'lease_seconds')::text, 'UTF8')"
            " WHERE topic LIKE '%TaskRun.Created'"
        ).rowcount
    assert forgotten == 2
    pg_app.rebuild_projections()
    leases = {task.task_key: task.lease_seconds for task in pg_app.task_runs(run)}
    assert leases == {"own": 12.5, "inherits": 40.0}


@pg
@pytest.mark.timeout(120)
def test_a_rebuild_racing_the_writers_makes_them_wait_and_loses_nothing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    workload = prepared_workload(pg_app, seed=4)

    def rebuilder(barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(8):
            pg_app.rebuild_projections()
            time.sleep(0.01)

    failures = run_threads(workload, 4, 150, rebuilder)
    before = postgres_rows(postgres_url)
    pg_app.rebuild_projections()
    assert differences(before, postgres_rows(postgres_url)) == []
    assert_log_agrees_with_rows(pg_app)
    assert_no_failures(failures)


@pytest.mark.timeout(120)
def test_rebuilding_after_a_random_workload_on_sqlite_gives_identical_rows(
    sqlite_app: FlowForge, sqlite_url: str
) -> None:
    workload = prepared_workload(sqlite_app, seed=5, runs=5)
    rng = random.Random(5)
    for _ in range(600):
        workload.step(rng)
    assert_the_workload_did_its_job(workload)

    before = sqlite_rows(sqlite_url)
    report = sqlite_app.rebuild_projections()
    after = sqlite_rows(sqlite_url)

    assert differences(before, after) == []
    assert before == after
    assert report.workflow_runs == len(before["workflow_runs"]) == len(workload.runs)
    assert report.task_runs == len(before["task_runs"]) == len(workload.tasks)
    assert_log_agrees_with_rows(sqlite_app)


# --- targeted: the rebuild's lock against a scheduler's transaction ------------------------


def lock_waiters(url: str) -> int:
    """How many sessions of this database are waiting for a lock."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pg
@pytest.mark.timeout(60)
def test_a_rebuild_while_the_scheduler_finishes_a_run_waits_for_it_instead_of_deadlocking(
    pg_app: FlowForge, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``advance_workflow_run`` writes a task row (promoting ``b``) and then the run
    row (``fail``: ``c`` failed with no attempts left) in one transaction. A rebuild that
    starts in between must wait for it, or make it wait; neither may fail."""
    definition = {
        "name": "promote_then_fail",
        "tasks": [
            {"key": "a", "type": "work"},
            {"key": "b", "type": "work", "depends_on": ["a"]},
            {"key": "c", "type": "work"},
        ],
        "retry": {"max_attempts": 1},
    }
    run = pg_app.start_workflow_run(definition)
    # The finishes below leave all the advancing (b's promotion, a task write; then the
    # run's failure) to the scheduler's advance: a's finish as when its run row was
    # held, c's because a failure never advances its run (advance.advance_after_finish).
    tasks = {t.task_key: t.id for t in pg_app.task_runs(run)}
    claim = pg_app.claim_task_run(tasks["a"], "w1", LONG)
    assert claim is not None
    succeed_leaving_a_mark(pg_app, tasks["a"], claim.fencing_token)
    claim = pg_app.claim_task_run(tasks["c"], "w1", LONG)
    assert claim is not None
    error = {"type": "RuntimeError", "message": "boom"}
    assert pg_app.finish_task_run(tasks["c"], claim.fencing_token, "fail", error=error)

    # Hold the scheduler between its task write and its run write until the rebuild is
    # queued behind a lock (or, should the rebuild not queue at all, for a few seconds).
    from flowforge.projections.writes.runs import RunWrites

    between_writes = threading.Event()
    move_run = RunWrites.move

    def paused(self: RunWrites, run_id: UUID, edge: Any, *, actor: str) -> Any:
        if edge.name == "fail":
            between_writes.set()
            deadline = time.monotonic() + 5
            while lock_waiters(postgres_url) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        return move_run(self, run_id, edge, actor=actor)

    monkeypatch.setattr(RunWrites, "move", paused)
    outcomes: dict[str, Any] = {}

    def advance() -> None:
        try:
            outcomes["advance"] = pg_app.advance_workflow_run(run)
        except Exception as exc:
            outcomes["advance"] = exc

    def rebuild() -> None:
        assert between_writes.wait(timeout=10)
        try:
            outcomes["rebuild"] = pg_app.rebuild_projections()
        except Exception as exc:
            outcomes["rebuild"] = exc

    threads = [threading.Thread(target=advance), threading.Thread(target=rebuild)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    monkeypatch.undo()

    assert not isinstance(outcomes["rebuild"], Exception), outcomes
    assert not isinstance(outcomes["advance"], Exception), outcomes
    assert outcomes["advance"].finished_as == "failed"
    assert outcomes["advance"].promoted == ["b"]
    before = postgres_rows(postgres_url)
    pg_app.rebuild_projections()
    assert differences(before, postgres_rows(postgres_url)) == []


def held_task_runs(conn: psycopg.Connection[Any], task_run_id: UUID) -> None:
    """Open a transaction on ``conn`` that holds task_runs' row-exclusive lock, as a
    claim's UPDATE does before its run's start reaches workflow_runs."""
    conn.execute("UPDATE task_runs SET lease_owner = lease_owner WHERE id = %s", (task_run_id,))


@pg
@pytest.mark.timeout(60)
def test_a_rebuild_gives_way_to_a_writer_holding_task_runs_and_waiting_for_workflow_runs(
    pg_app: FlowForge, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim takes task_runs (its UPDATE) before workflow_runs (its run's start); the
    rebuild takes workflow_runs, then task_runs. Caught between the two, the rebuild
    gives up its place after its bounded wait (a lock timeout: not the deadlock
    detector's abort a second later, which could have hit the writer) and tries
    again once the writer is done: both succeed."""
    run = pg_app.start_workflow_run(ONE_TASK)
    (task,) = pg_app.task_runs(run)
    caplog.set_level(logging.DEBUG, logger="flowforge.app.rebuild")
    outcomes: dict[str, Any] = {}

    def rebuild() -> None:
        try:
            outcomes["rebuild"] = pg_app.rebuild_projections()
        except Exception as exc:
            outcomes["rebuild"] = exc

    thread = threading.Thread(target=rebuild)
    with psycopg.connect(postgres_url) as writer:
        held_task_runs(writer, task.id)
        thread.start()
        wait_until(lambda: lock_waiters(postgres_url), 10, "the rebuild waiting for task_runs")
        # The rebuild holds workflow_runs and waits for task_runs: this waits for it.
        writer.execute("UPDATE workflow_runs SET state = state WHERE id = %s", (run,))
    thread.join(timeout=30)

    assert not isinstance(outcomes["rebuild"], Exception), outcomes
    causes = [
        getattr(r, "cause", "")
        for r in caplog.records
        if r.getMessage().startswith("rebuild gave way")
    ]
    assert causes and all("lock timeout" in cause for cause in causes), causes


@pg
@pytest.mark.timeout(60)
def test_a_rebuild_that_cannot_take_its_locks_in_time_says_so_and_changes_nothing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    run = pg_app.start_workflow_run(ONE_TASK)
    (task,) = pg_app.task_runs(run)
    before = postgres_rows(postgres_url)
    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += rebuild_module.LOCK_DEADLINE_SECONDS  # the next try is the last

    with psycopg.connect(postgres_url) as writer:
        held_task_runs(writer, task.id)
        with pytest.raises(errors.TransactionConflictError, match="could not take the projected"):
            rebuild_module.rebuild_projections(
                pg_app.store, pg_app.events, sleep=pause, clock=lambda: now[0]
            )
        writer.rollback()
    assert now[0] == rebuild_module.LOCK_DEADLINE_SECONDS  # two tries, one pause between them
    assert differences(before, postgres_rows(postgres_url)) == []


@pg
@pytest.mark.timeout(60)
def test_two_schedulers_advancing_one_run_at_once_never_deadlock(
    pg_app: FlowForge, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """advance.py says several schedulers may advance one run at once. Here the first
    (``late``) steps the tasks before ``a`` succeeds and finds nothing to do; the second
    (``early``) steps them after, promotes ``b`` (a task row lock) and derives ``failed``
    (``c`` failed for good). Then ``late`` derives ``failed`` too, takes the run row,
    and cancels the leftover ``b``, which ``early`` holds, while ``early`` waits for the
    run row. Both must finish, one of them having done the work; neither may raise."""
    from flowforge.app import advance as advance_module
    from flowforge.projections.writes.runs import RunWrites

    definition = {
        "name": "two_schedulers",
        "tasks": [
            {"key": "a", "type": "work"},
            {"key": "b", "type": "work", "depends_on": ["a"]},
            {"key": "c", "type": "work"},
        ],
        "retry": {"max_attempts": 1},
    }
    run = pg_app.start_workflow_run(definition)
    assert pg_app.advance_workflow_run(run).started
    tasks = {t.task_key: t.id for t in pg_app.task_runs(run)}
    tokens = {}
    for key in ("a", "c"):
        claim = pg_app.claim_task_run(tasks[key], "w1", LONG)
        assert claim is not None
        tokens[key] = claim.fencing_token
    error = {"type": "RuntimeError", "message": "boom"}
    assert pg_app.finish_task_run(tasks["c"], tokens["c"], "fail", error=error)

    late_stepped, late_may_finish = threading.Event(), threading.Event()
    finish_if_derived = advance_module._finish_if_derived
    move_run = RunWrites.move

    def finish_late(writes: Any, run_row: Any, *rest: Any) -> None:
        if threading.current_thread().name == "late":
            late_stepped.set()
            late_may_finish.wait(timeout=5)
        finish_if_derived(writes, run_row, *rest)

    def early_takes_run_edge(self: RunWrites, run_id: UUID, edge: Any, *, actor: str) -> Any:
        if threading.current_thread().name == "early" and not late_may_finish.is_set():
            late_may_finish.set()  # early holds b; let late take the run row first
            deadline = time.monotonic() + 5
            while lock_waiters(postgres_url) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        return move_run(self, run_id, edge, actor=actor)

    monkeypatch.setattr(advance_module, "_finish_if_derived", finish_late)
    monkeypatch.setattr(RunWrites, "move", early_takes_run_edge)
    outcomes: dict[str, Any] = {}

    def advance() -> None:
        name = threading.current_thread().name
        try:
            outcomes[name] = pg_app.advance_workflow_run(run)
        except Exception as exc:
            outcomes[name] = exc

    late = threading.Thread(target=advance, name="late")
    late.start()
    assert late_stepped.wait(timeout=10)
    assert pg_app.finish_task_run(tasks["a"], tokens["a"], "succeed")
    early = threading.Thread(target=advance, name="early")
    early.start()
    for thread in (early, late):
        thread.join(timeout=30)
    monkeypatch.undo()

    assert not any(isinstance(o, Exception) for o in outcomes.values()), outcomes
    assert pg_app.get_workflow_run(run).state == "failed"
    assert {t.task_key: t.state for t in pg_app.task_runs(run)} == {
        "a": "succeeded",
        "b": "cancelled",
        "c": "failed",
    }


# --- targeted: values a user hands in come back from the log as they went in -------------

#: JSON a handler may well return: objects that happen to have exactly the two keys the
#: ``eventsourcing`` JSON transcoder uses for the values it encodes itself.
LOOKALIKES = [
    # decoded as a UUID: the log says something else than the row
    pytest.param({"_type_": "uuid_hex", "_data_": "0" * 32}, id="registered_name"),
    # not decodable at all: the task's log, its history and every rebuild fail
    pytest.param({"_type_": "csv_row", "_data_": [1, 2]}, id="unregistered_name"),
    pytest.param({"rows": [{"_type_": "decimal_str", "_data_": "1.5"}]}, id="nested"),
]
ONE_TASK: dict[str, Any] = one_task()


@pytest.mark.parametrize("result", LOOKALIKES)
def test_a_result_shaped_like_an_encoded_value_comes_back_from_the_log_unchanged(
    app: FlowForge, result: dict[str, Any]
) -> None:
    run = app.start_workflow_run(ONE_TASK)
    (task,) = app.task_runs(run)
    claim = app.claim_task_run(task.id, "w1", LONG)
    assert claim is not None
    assert app.finish_task_run(task.id, claim.fencing_token, "succeed", result)
    row = app.get_task_run(task.id)
    assert row.result == result
    assert app.task_run_aggregate(task.id).result == result
    assert app.history(task.id)[-1].result == result
    app.rebuild_projections()
    assert app.get_task_run(task.id) == row


@pytest.mark.parametrize("value", LOOKALIKES)
def test_inputs_shaped_like_an_encoded_value_come_back_from_the_log_unchanged(
    app: FlowForge, value: dict[str, Any]
) -> None:
    run = app.start_workflow_run(ONE_TASK, value)
    row = app.get_workflow_run(run)
    assert row.inputs == value
    assert app.workflow_run_aggregate(run).inputs == value
    app.rebuild_projections()
    assert app.get_workflow_run(run) == row


@pytest.mark.parametrize("field", ["result", "error"])
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("bad\x00byte", id="nul"),
        # what str() of an OSError about a non-UTF-8 file name holds (surrogateescape)
        pytest.param("no such file: b\udcffd.csv", id="surrogate"),
    ],
)
def test_text_a_handler_may_produce_is_recorded_or_refused_up_front_never_lost_at_finish(
    app: FlowForge, field: str, text: str
) -> None:
    """A handler's output or an exception message may carry a NUL or a lone surrogate.
    Storing it (as is or replaced), or refusing it with ValueError before any SQL, are
    both fine. Any other error at finish time is not: the outcome could never be
    recorded, and the task would be reaped and rerun for ever."""
    run = app.start_workflow_run(ONE_TASK)
    (task,) = app.task_runs(run)
    claim = app.claim_task_run(task.id, "w1", LONG)
    assert claim is not None
    outcome = "succeed" if field == "result" else "fail"
    result = {"text": text} if field == "result" else None
    error = {"type": "FileNotFoundError", "message": text}
    try:
        won = app.finish_task_run(task.id, claim.fencing_token, outcome, result, error)
    except ValueError:
        assert app.get_task_run(task.id).state == "running"
        return
    assert won
    row = dataclasses.asdict(app.get_task_run(task.id))
    assert row["state"] == ("succeeded" if field == "result" else "failed")
    snapshot = app.task_run_aggregate(task.id).snapshot()
    assert {k: row[k] for k in snapshot} == snapshot


@pytest.mark.parametrize("value", [1e16, 1e23])
def test_a_float_result_comes_back_as_the_same_float_on_every_backend(
    app: FlowForge, value: float
) -> None:
    run = app.start_workflow_run(ONE_TASK)
    (task,) = app.task_runs(run)
    claim = app.claim_task_run(task.id, "w1", LONG)
    assert claim is not None
    assert app.finish_task_run(task.id, claim.fencing_token, "succeed", {"x": value})
    (stored,) = app.get_task_run(task.id).result.values()
    assert type(stored) is float
    assert stored == value


# --- replay trusts nothing but the machine table ---------------------------------------


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_rebuild_refuses_a_forged_claim_landing_in_succeeded_and_names_the_event(
    backend: str, request: pytest.FixtureRequest
) -> None:
    app, url = on_backend(backend, request)
    (task,) = app.task_runs(app.start_workflow_run(SINGLE))
    assert app.claim_task_run(task.id, "w1", LONG)
    claim: Any = list(app.events.events.get(task.id))[-1]  # fields mypy cannot see
    forged = dataclasses.replace(claim, state="succeeded")  # ready -> succeeded
    replace_stored_event(backend, url, app.events.mapper.to_stored_event(forged))
    rows_before = postgres_rows(url) if backend == "postgres" else sqlite_rows(url)

    with pytest.raises(errors.CorruptEventLogError) as caught:
        app.rebuild_projections()
    message = str(caught.value)
    assert "TaskRun.Claimed" in message
    assert f"{task.id} v2" in message
    assert "'claim' is 'ready' -> 'running'" in message
    # The rebuild is one transaction: refusing it leaves the projected rows as they were.
    assert rows_before == (postgres_rows(url) if backend == "postgres" else sqlite_rows(url))
    # The aggregate's own replay refuses the same event.
    with pytest.raises(errors.CorruptEventLogError, match=r"TaskRun\.Claimed"):
        app.task_run_aggregate(task.id)


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_rebuild_refuses_an_event_whose_source_is_not_the_rows_state(
    backend: str, request: pytest.FixtureRequest
) -> None:
    app, url = on_backend(backend, request)
    (task,) = app.task_runs(app.start_workflow_run(SINGLE))  # created ready
    assert app.claim_task_run(task.id, "w1", LONG)
    claim: Any = list(app.events.events.get(task.id))[-1]  # fields mypy cannot see
    # A real edge (pending -> ready) at the right version, but the row is ready, not
    # pending: only the row's state, not the version, shows the event does not follow.
    fields = {f.name: getattr(claim, f.name) for f in dataclasses.fields(claim)}
    fields.update(source="pending", state="ready")
    forged = task_run.TaskRun.DependenciesSatisfied(**fields)
    replace_stored_event(backend, url, app.events.mapper.to_stored_event(forged))
    with pytest.raises(errors.CorruptEventLogError) as caught:
        app.rebuild_projections()
    assert f"TaskRun.DependenciesSatisfied of {task.id} v2" in str(caught.value)
    assert "'pending'" in str(caught.value)


def on_backend(backend: str, request: pytest.FixtureRequest) -> tuple[FlowForge, str]:
    """The service on ``backend`` and its database URL."""
    app: FlowForge = request.getfixturevalue(f"{'pg' if backend == 'postgres' else 'sqlite'}_app")
    return app, request.getfixturevalue(f"{backend}_url")


def replace_stored_event(backend: str, url: str, stored: Any) -> None:
    """Overwrite one event of the log, as a tool other than FlowForge could."""
    table, mark = ("flowforge_events", "%s") if backend == "postgres" else ("stored_events", "?")
    sql = (
        f"UPDATE {table} SET topic = {mark}, state = {mark} "
        f"WHERE originator_id = {mark} AND originator_version = {mark}"
    )
    params = (stored.topic, stored.state, stored.originator_id, stored.originator_version)
    if backend == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(sql, params).rowcount == 1
    else:
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as lite, lite:
            # The SQLite recorder stores the id as its hex string (no dashes).
            assert lite.execute(sql, (*params[:2], params[2].hex, params[3])).rowcount == 1


# --- `flowforge db rebuild`'s verifier: every field, the times too -------------------------
# The command itself, through its real process, is in tests/e2e/test_cli.py (a row the
# rebuild wrote that disagrees with the log: exit 1, the field named).


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_every_row_matches_the_log_to_the_microsecond_before_and_after_a_rebuild(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Exact on both backends: every row's times, as the write path and then the rebuild
    wrote them, are its first and last events' timestamps, not a rounding of them."""
    app, _ = on_backend(backend, request)
    # Seed 7 (was 6): since a delayed run's task can no longer be promoted by hand
    # before its start time, seed 6's 600 steps reached no reclaim on either backend.
    workload = prepared_workload(app, seed=7, runs=5)
    rng = random.Random(7)
    for _ in range(600):
        workload.step(rng)
    assert_the_workload_did_its_job(workload)
    rows = len(workload.runs) + len(workload.tasks)

    assert db.verify(app) == (rows, [])
    app.rebuild_projections()
    assert db.verify(app) == (rows, [])

    # The times were compared, and they are not all one time (nor one millisecond's).
    task = app.get_task_run(workload.tasks[0])
    expected = db.logged_row(app.task_run_aggregate(task.id))
    assert (expected["created_at"], expected["updated_at"]) == (task.created_at, task.updated_at)
    times = {t.updated_at for t in map(app.get_task_run, workload.tasks)}
    assert len(times) > 1


def shift_time(backend: str, url: str, table: str, column: str, row_id: UUID, micros: int) -> None:
    """Move one row's ``column`` by ``micros`` microseconds, by hand, behind FlowForge."""
    if backend == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            changed = conn.execute(
                f"UPDATE {table} SET {column} = {column} + %s * interval '1 microsecond'"
                " WHERE id = %s",
                (micros, row_id),
            ).rowcount
    else:
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as lite, lite:
            # SQLite stores a time as integer microseconds since the epoch.
            changed = lite.execute(
                f"UPDATE {table} SET {column} = {column} + ? WHERE id = ?", (micros, str(row_id))
            ).rowcount
    assert changed == 1


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_the_verifier_names_each_row_whose_time_is_one_microsecond_off_the_log(
    backend: str, request: pytest.FixtureRequest
) -> None:
    app, url = on_backend(backend, request)
    run_id = app.start_workflow_run(SINGLE)
    (task,) = app.task_runs(run_id)
    claim = app.claim_task_run(task.id, "w1", LONG)
    assert claim is not None
    assert app.finish_task_run(task.id, claim.fencing_token, "succeed", {"n": 1})
    run, task = app.get_workflow_run(run_id), app.get_task_run(task.id)
    assert db.verify(app) == (2, [])

    shift_time(backend, url, "workflow_runs", "created_at", run_id, -1)
    shift_time(backend, url, "task_runs", "updated_at", task.id, 1)

    micro = timedelta(microseconds=1)
    assert db.verify(app) == (
        2,
        [
            f"workflow run {run_id}: created_at is {timefmt.iso(run.created_at - micro)} in "
            f"the table but {timefmt.iso(run.created_at)} in the log",
            f"task run {task.id} (only): updated_at is {timefmt.iso(task.updated_at + micro)} "
            f"in the table but {timefmt.iso(task.updated_at)} in the log",
        ],
    )
