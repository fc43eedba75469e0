"""Claim+finish throughput on PostgreSQL: FlowForge beside pgbench running the same SQL.

    python -m bench.claim_finish                      # 1, 2 and 4 processes, 2-3 minutes
    python -m bench.claim_finish --processes 1 2 --tasks 500 --pgbench-seconds 5
    python -m bench.claim_finish --database-url postgresql://postgres@127.0.0.1:5432/mydb

One *cycle* is what a worker does per task: ``claim_task_run`` (READY -> RUNNING, new
fencing token, lease from the database's clock) then ``finish_task_run(..., "succeed")``.
Each is one transaction holding a conditional UPDATE of the ``task_runs`` row and the
INSERT of its event into ``flowforge_events``: per cycle 2 UPDATEs, 2 INSERTs, 2 commits.

Measured, for each process count:

* FlowForge as shipped: N worker processes (spawned, each with its own ``FlowForge`` and
  connection pool), each claiming and finishing its own disjoint slice of task runs that
  were created before the clock starts (wide workflows of independent tasks, all READY).
* pgbench, the ceiling: the same two conditional UPDATEs (same table definition, same
  WHERE clauses, same client-side fencing token) and nothing else, one client per process.
* pgbench + events: the exact transaction shape FlowForge runs (BEGIN, UPDATE, INSERT of a
  425-byte event, COMMIT, twice), and the same with the lock, to separate what the
  database costs from what the Python side costs.
* Python, bare: the least a Python client can cost for an event per transition. Each
  claim and each finish is ONE autocommitted statement on pgbench's tables (the
  conditional UPDATE and, in a CTE, the INSERT of its event, the same 425 bytes), sent
  with psycopg's prepared statements by N processes: what a server-side function per
  transition would leave the client to do, with no FlowForge code at all.
* FlowForge's statements, replayed (``bench/replay.py``): the round trips of one real
  cycle recorded as FlowForge sends them (the claim and its run's start; the leaf's
  success with its run's try, start, success, mark and the release of a task a
  concurrency limit held: 8 statements, 2 round trips),
  replayed for other task runs by pgbench (C, each round trip one pipeline) and by a
  bare Python client on libpq: what FlowForge's SQL costs with no FlowForge code
  around it, so the gap to "FlowForge as shipped" is FlowForge's Python.
* FlowForge in batches of 10: the same work through ``claim_task_runs_and_their_runs``
  and ``finish_task_runs`` (one transaction, one round trip, for ten claims; the same for
  ten finishes). Its latency columns are a batch's, not one task's.
* SQLite, one process, for context (the embedded mode).

Reported per measurement: cycles/s (cycles over the wall-clock window from the first
process's start to the last one's end), p50/p99 of one cycle's latency, the share of the
pgbench ceiling at the same process count, the client's CPU per cycle (the workers'
``process_time``, or pgbench's rusage), and the whole machine's busy CPU per cycle and
busy share (``/proc/stat``, 10 ms ticks): on a quiet machine that is client + server +
kernel; a neighbour's load shows up there as a jump, which is how to spot a disturbed
measurement.

By default the bench creates a fresh database ``flowforge_bench`` on the local server and
drops it at the end (``--keep`` keeps it). With ``--database-url`` it uses that database
as it is, never drops it, and only removes its own ``bench_*`` tables; the task runs it
creates there stay (they are real FlowForge runs).

Nothing here asserts a time: the numbers are printed, not checked.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import multiprocessing
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit
from uuid import UUID

import psycopg
from psycopg import sql

from bench import replay
from bench.cpu import machine_busy_seconds
from flowforge.app.commands import Finish
from flowforge.app.service import FlowForge
from flowforge.processes.run_cache import KNOWN_RUNS_SENT

PROC_STAT = "/proc/stat"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
BENCH_DATABASE = "flowforge_bench"

#: Independent tasks per workflow run: every one READY at creation.
TASKS_PER_RUN = 50
WIDE_WORKFLOW = {
    "name": "bench_wide",
    "tasks": [{"key": f"t{i:02d}", "type": "noop"} for i in range(TASKS_PER_RUN)],
}
#: Untimed cycles each process runs first (connections opened, statements prepared).
WARMUP_CYCLES = 50
LEASE_SECONDS = 300.0
RESULT = {"ok": True}
#: Seconds a worker waits for the others at the start line before giving up.
BARRIER_TIMEOUT_S = 180
#: Size of a stored Claimed/Succeeded event's ``state`` (measured: 416-433 bytes).
EVENT_PAYLOAD_BYTES = 425
#: The id range each pgbench client owns; a client that runs out of rows aborts.
PGBENCH_ROWS_PER_CLIENT = 60_000

VARIANT_SHIPPED = "as shipped"
#: Tasks a batched cycle claims in one call and finishes in one call.
BATCH_SIZE = 10
VARIANT_BATCHED = f"batches of {BATCH_SIZE}"
SQLITE = "FlowForge on SQLite"
#: Earlier versions also measured patched variants (the events-table lock, no pre-ping,
#: no ``cursor.description``: docs/performance.md); what they priced is gone or shipped.
VARIANTS = {"shipped": VARIANT_SHIPPED, "batched": VARIANT_BATCHED}
DEFAULT_VARIANTS = ["shipped", "batched"]

# --- SQL (constants; identifiers composed with psycopg.sql) ------------------------------

LOCK_EVENTS_TABLE = "LOCK TABLE flowforge_events IN EXCLUSIVE MODE"
CREATE_DATABASE = sql.SQL("CREATE DATABASE {}")
DROP_DATABASE = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
CHECKPOINT = "CHECKPOINT"
COUNT_SUCCEEDED_TASK_RUNS = "SELECT count(*) FROM task_runs WHERE state = 'succeeded'"
SERVER_VERSION = "SHOW server_version"
DROP_BENCH_TABLES = [
    "DROP TABLE IF EXISTS bench_task_runs, bench_events",
    "DROP SEQUENCE IF EXISTS bench_events_notification_id_seq",
]
# The ceiling's tables are copies of FlowForge's (columns, CHECKs, every index), so the
# UPDATEs maintain the same indexes and the INSERTs the same unique keys.
CREATE_BENCH_TABLES = [
    *DROP_BENCH_TABLES,
    "CREATE TABLE bench_task_runs (LIKE task_runs INCLUDING ALL)",
    "CREATE SEQUENCE bench_events_notification_id_seq",
    "CREATE TABLE bench_events (LIKE flowforge_events INCLUDING ALL)",
    "ALTER TABLE bench_events ALTER notification_id"
    " SET DEFAULT nextval('bench_events_notification_id_seq')",
]
# Client c owns keys c * 1000000 + 1 .. c * 1000000 + rows; a key's uuid is md5(key).
POPULATE_BENCH_TASK_RUNS = """
INSERT INTO bench_task_runs (id, workflow_run_id, task_key, task_type, depends_on,
                             max_attempts, state, fencing_token, attempt, version,
                             created_at, updated_at)
SELECT md5((c * 1000000 + g)::text)::uuid, md5('run' || c)::uuid, 't' || g, 'noop',
       '[]'::jsonb, 1, 'ready', 0, 1, 1, now(), now()
FROM generate_series(0, %(clients)s - 1) AS c, generate_series(1, %(rows)s) AS g
"""
RESET_BENCH_TASK_RUNS = """
UPDATE bench_task_runs
SET state = 'ready', fencing_token = 0, lease_owner = NULL, lease_expires_at = NULL,
    started_at = NULL, finished_at = NULL, result = NULL, error = NULL, version = 1,
    updated_at = now()
WHERE state <> 'ready'
"""
TRUNCATE_BENCH_EVENTS = "TRUNCATE bench_events"
VACUUM_BENCH_TABLES = "VACUUM ANALYZE bench_task_runs, bench_events"
COUNT_BENCH_SUCCEEDED = "SELECT count(*) FROM bench_task_runs WHERE state = 'succeeded'"

# pgbench scripts. Variables persist per client across transactions: :n counts this
# client's cycles (-D n=0), :k is its next key. The claim reads the new fencing token
# back (\gset) and the finish is conditional on it, as a worker's is.
_PGB_NEXT_KEY = "\\set n :n + 1\n\\set k :client_id * 1000000 + :n\n"
_PGB_CLAIM = """UPDATE bench_task_runs
SET state = 'running', fencing_token = fencing_token + 1, lease_owner = 'pgbench',
    lease_expires_at = now() + 300 * interval '1 second',
    started_at = coalesce(started_at, now()), version = version + 1, updated_at = now()
WHERE id = md5(:k::text)::uuid AND state = 'ready'
RETURNING fencing_token AS token \\gset
"""
_PGB_FINISH = """UPDATE bench_task_runs
SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL, finished_at = now(),
    result = '{"ok": true}', error = NULL, version = version + 1, updated_at = now()
WHERE id = md5(:k::text)::uuid AND state = 'running' AND fencing_token = :token
RETURNING *;
"""
_PGB_LOCK = "LOCK TABLE bench_events IN EXCLUSIVE MODE;\n"
_PGB_EVENT = """INSERT INTO bench_events (originator_id, originator_version, topic, state)
VALUES (md5(:k::text)::uuid, {version}, :{topic}::text, decode(:payload::text, 'hex'));
"""
_PGB_CLAIMED = _PGB_EVENT.format(version=2, topic="claimed")
_PGB_SUCCEEDED = _PGB_EVENT.format(version=3, topic="succeeded")
# Passed with --define, like the payload: pgbench would substitute a ":name" even inside
# a quoted literal, and a topic has a colon in it.
PGBENCH_VARIABLES = {
    "n": "0",
    "payload": "7b" * EVENT_PAYLOAD_BYTES,
    "claimed": "flowforge.aggregates.task_run:TaskRun.Claimed",
    "succeeded": "flowforge.aggregates.task_run:TaskRun.Succeeded",
}

PGBENCH_SQL_ONLY = "pgbench: 2 UPDATEs (ceiling)"
PGBENCH_EVENTS = "pgbench: + 2 event INSERTs"
PGBENCH_EVENTS_LOCK = "pgbench: + INSERTs + LOCK"
PGBENCH_SCRIPTS = {
    # Each UPDATE is its own (autocommit) transaction: 2 commits per cycle, as FlowForge.
    PGBENCH_SQL_ONLY: _PGB_NEXT_KEY + _PGB_CLAIM + _PGB_FINISH,
    PGBENCH_EVENTS: (
        _PGB_NEXT_KEY
        + "BEGIN;\n"
        + _PGB_CLAIM
        + _PGB_CLAIMED
        + "COMMIT;\nBEGIN;\n"
        + _PGB_FINISH
        + _PGB_SUCCEEDED
        + "COMMIT;\n"
    ),
    PGBENCH_EVENTS_LOCK: (
        _PGB_NEXT_KEY
        + "BEGIN;\n"
        + _PGB_CLAIM
        + _PGB_LOCK
        + _PGB_CLAIMED
        + "COMMIT;\nBEGIN;\n"
        + _PGB_FINISH
        + _PGB_LOCK
        + _PGB_SUCCEEDED
        + "COMMIT;\n"
    ),
}
PGBENCH_KEYS = {"sql": PGBENCH_SQL_ONLY, "events": PGBENCH_EVENTS, "lock": PGBENCH_EVENTS_LOCK}

BARE_PYTHON = "Python, bare: 1 statement per transition"
# pgbench's SET and WHERE clauses, with the event INSERT in a CTE of the same statement.
_BARE_EVENT = """INSERT INTO bench_events (originator_id, originator_version, topic, state)
SELECT id, version, %(topic)s, %(payload)s FROM t"""
BARE_CLAIM = (
    "WITH t AS ("
    + _PGB_CLAIM.replace(":k::text", "%(k)s::text").replace(
        "RETURNING fencing_token AS token \\gset\n", "RETURNING id, version, fencing_token"
    )
    + "), e AS ("
    + _BARE_EVENT
    + ") SELECT fencing_token FROM t"
)
BARE_FINISH = (
    "WITH t AS ("
    + _PGB_FINISH.replace(":k::text", "%(k)s::text")
    .replace(":token", "%(token)s")
    .replace("RETURNING *;\n", "RETURNING id, version")
    + ") "
    + _BARE_EVENT
)
BARE_PAYLOAD = bytes.fromhex(PGBENCH_VARIABLES["payload"])

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    system: str
    processes: int
    cycles: int
    seconds: float
    latencies_us: Sequence[float] = field(repr=False)
    #: CPU time of the client side (Python workers, or pgbench), user + system.
    client_cpu_seconds: float = float("nan")
    #: CPU time the whole machine was busy meanwhile (client, server, kernel, neighbours).
    machine_cpu_seconds: float = float("nan")
    #: The wall-clock window the machine's CPU was measured over.
    window_seconds: float = float("nan")

    @property
    def per_second(self) -> float:
        return self.cycles / self.seconds

    @property
    def client_cpu_us_per_cycle(self) -> float:
        return self.client_cpu_seconds / self.cycles * 1e6

    @property
    def machine_cpu_us_per_cycle(self) -> float:
        return self.machine_cpu_seconds / self.cycles * 1e6

    @property
    def machine_busy(self) -> float:
        """Share of all the machine's cores that were busy during the measurement."""
        return self.machine_cpu_seconds / (self.window_seconds * (os.cpu_count() or 1))

    def percentile_ms(self, p: int) -> float:
        if len(self.latencies_us) < 2:
            return float("nan")
        return statistics.quantiles(self.latencies_us, n=100)[p - 1] / 1000


@dataclass(frozen=True, slots=True)
class WorkerResult:
    started: float = 0.0
    ended: float = 0.0
    latencies_us: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    lost: int = 0
    #: Tasks claimed and finished in the timed window.
    cycles: int = 0
    error: str | None = None


class MachineCpu:
    """The whole machine's busy CPU time over any window, from ``/proc/stat`` sampled by a
    thread: it shows whether a measurement saturated the cores, and what a cycle costs
    the client, the server and the kernel together (on a quiet machine)."""

    INTERVAL_S = 0.05

    def __init__(self) -> None:
        self._times: list[float] = []
        self._busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        if Path(PROC_STAT).exists():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def busy_seconds(self, start: float, end: float) -> float:
        """Busy CPU seconds between two ``time.monotonic()`` readings (interpolated)."""
        while self._thread.is_alive() and self._times and self._times[-1] < end:
            time.sleep(self.INTERVAL_S)  # the sample after ``end`` is due any moment
        if not self._times or start < self._times[0] or end > self._times[-1]:
            return float("nan")
        return self._at(end) - self._at(start)

    def _at(self, t: float) -> float:
        i = min(max(bisect.bisect_left(self._times, t), 1), len(self._times) - 1)
        (t0, t1), (b0, b1) = self._times[i - 1 : i + 1], self._busy[i - 1 : i + 1]
        return b0 + (b1 - b0) * (t - t0) / (t1 - t0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._busy.append(machine_busy_seconds())
            self._times.append(time.monotonic())
            self._stop.wait(self.INTERVAL_S)


MACHINE_CPU = MachineCpu()


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- FlowForge: the workload --------------------------------------------------------------


def create_ready_tasks(ff: FlowForge, count: int) -> list[UUID]:
    """``count`` READY task runs (rounded up to whole runs), before any clock starts."""
    ids: list[UUID] = []
    while len(ids) < count:
        run_id = ff.start_workflow_run(WIDE_WORKFLOW)
        ids.extend(t.id for t in ff.task_runs(run_id) if t.state == "ready")
    return ids[:count]


def cycle(ff: FlowForge, task_run_id: UUID, worker_id: str) -> bool:
    """One claim+finish; False if either write lost (never, with disjoint ids)."""
    claim = ff.claim_task_run(task_run_id, worker_id, LEASE_SECONDS)
    if claim is None:
        return False
    return ff.finish_task_run(task_run_id, claim.fencing_token, "succeed", RESULT)


def batched_cycle(
    ff: FlowForge, task_run_ids: list[UUID], worker_id: str, known: deque[UUID]
) -> bool:
    """Claim+finish of a batch: one batched claim (the tasks' own leases, their runs
    read unless ``known`` and parsed, as a worker does), one batched finish; False if
    any write lost."""
    rows, runs = ff.claim_task_runs_and_their_runs(task_run_ids, worker_id, unless_known=known)
    for run in runs:
        ff.definitions.of(run)
        known.append(run.id)
    finishes: list[Finish] = []
    for row in rows:
        if row is None:
            return False
        finishes.append(Finish(row.id, row.fencing_token, "succeed", RESULT))
    return all(ff.finish_task_runs(finishes, actor=worker_id))


def worker_main(
    url: str,
    variant: str,
    warmup: list[UUID],
    timed: list[UUID],
    barrier: Any,
    results: Any,
) -> None:
    """One worker process: its own FlowForge, warm-up, then the timed cycles."""
    try:
        with FlowForge(url) as ff:
            worker_id = f"bench-{os.getpid()}"
            if variant == VARIANT_BATCHED:
                known: deque[UUID] = deque(maxlen=KNOWN_RUNS_SENT)
                results.put(
                    timed_cycles(
                        lambda batch: batched_cycle(ff, batch, worker_id, known),
                        batches(warmup),
                        batches(timed),
                        barrier,
                        tasks_in=len,
                    )
                )
                return
            results.put(
                timed_cycles(lambda task_id: cycle(ff, task_id, worker_id), warmup, timed, barrier)
            )
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        barrier.abort()
        results.put(WorkerResult(error=f"{type(exc).__name__}: {exc}"))


def batches(task_run_ids: list[UUID]) -> list[list[UUID]]:
    return [task_run_ids[i : i + BATCH_SIZE] for i in range(0, len(task_run_ids), BATCH_SIZE)]


def timed_cycles(
    cycle: Callable[[Any], bool],
    warmup: list[Any],
    timed: list[Any],
    barrier: Any,
    tasks_in: Callable[[Any], int] = lambda _: 1,
) -> WorkerResult:
    """``cycle`` over the warm-up items, then, once every process is at the barrier, over
    the timed ones, each timed; False from ``cycle`` counts as a lost race. An item is
    one task's cycle, or ``tasks_in(item)`` tasks' (a batch: its latency is the batch's)."""
    lost = sum(not cycle(item) for item in warmup)
    barrier.wait(BARRIER_TIMEOUT_S)
    latencies: list[float] = []
    started, cpu = time.monotonic(), time.process_time()
    for item in timed:
        t0 = time.perf_counter_ns()
        lost += not cycle(item)
        latencies.append((time.perf_counter_ns() - t0) / 1000)
    ended, cpu = time.monotonic(), time.process_time() - cpu
    return WorkerResult(started, ended, latencies, cpu, lost, sum(map(tasks_in, timed)))


def measure_flowforge(url: str, variant: str, processes: int, tasks: int) -> Measurement:
    per_process = WARMUP_CYCLES + tasks
    with FlowForge(url) as ff:
        ids = create_ready_tasks(ff, processes * per_process)
    pg_command(url, CHECKPOINT)
    before = pg_value(url, COUNT_SUCCEEDED_TASK_RUNS)
    slices = [ids[i * per_process : (i + 1) * per_process] for i in range(processes)]
    measured = run_workers(worker_main, (url, variant), slices, f"FlowForge {variant}")
    written = pg_value(url, COUNT_SUCCEEDED_TASK_RUNS) - before
    if written != processes * per_process:
        raise RuntimeError(f"{written} task runs succeeded, expected {processes * per_process}")
    return measured


def bare_worker_main(
    url: str, warmup: list[int], timed: list[int], barrier: Any, results: Any
) -> None:
    """One bare client process: pgbench's rows by key, one statement per transition."""
    try:
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:

            def cycle(key: int) -> bool:
                claimed = conn.execute(
                    BARE_CLAIM, {"k": key, "topic": "claimed", "payload": BARE_PAYLOAD}
                ).fetchone()
                if claimed is None:
                    return False
                params = {"k": key, "token": claimed[0], "topic": "succeeded"}
                done = conn.execute(BARE_FINISH, {**params, "payload": BARE_PAYLOAD})
                return done.rowcount == 1

            results.put(timed_cycles(cycle, warmup, timed, barrier))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        barrier.abort()
        results.put(WorkerResult(error=f"{type(exc).__name__}: {exc}"))


def measure_bare(url: str, processes: int, tasks: int) -> Measurement:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET_BENCH_TASK_RUNS)
        conn.execute(TRUNCATE_BENCH_EVENTS)
        conn.execute(VACUUM_BENCH_TABLES)
        conn.execute(CHECKPOINT)
    per_process = WARMUP_CYCLES + tasks
    # Client c owns keys c * 1000000 + 1 ..., as pgbench's clients do.
    slices = [[c * 1_000_000 + n for n in range(1, per_process + 1)] for c in range(processes)]
    measured = run_workers(bare_worker_main, (url,), slices, BARE_PYTHON)
    written = pg_value(url, COUNT_BENCH_SUCCEEDED)
    if written != processes * per_process:
        raise RuntimeError(f"{written} rows finished, expected {processes * per_process}")
    return measured


# --- FlowForge's own statements, replayed (bench/replay.py) ------------------------------

REPLAY_PGBENCH = "pgbench: FlowForge's statements"
REPLAY_PYTHON = "Python, bare: FlowForge's statements"


@dataclass(frozen=True, slots=True)
class Captured:
    """One real cycle's round trips, and the keys of the task run it was of."""

    round_trips: list[list[replay.Query]]
    keys: replay.TaskKeys


def capture(url: str) -> Captured:
    """A steady-state cycle as FlowForge sends it: of a task whose run this process
    already knows, so its success is a leaf's (the first task of a run FlowForge has
    not seen takes the general path, which reads the run: 1 cycle in 50 here)."""
    warmup = TASKS_PER_RUN + 1  # a whole run, and the first task of the next
    with FlowForge(url) as ff:
        ids = create_ready_tasks(ff, warmup + 1)
        for task_run_id in ids[:warmup]:
            cycle(ff, task_run_id, "bench")
        round_trips = replay.capture_cycle(ff, ids[warmup], "bench", RESULT)
    with psycopg.connect(url) as conn:
        (keys,) = replay.task_keys(conn, ids[warmup:])
    return Captured(round_trips, keys)


def replayed_tasks(url: str, count: int) -> list[replay.TaskKeys]:
    with FlowForge(url) as ff:
        ids = create_ready_tasks(ff, count)
    with psycopg.connect(url) as conn:
        return replay.task_keys(conn, ids)


def check_replayed(url: str, keys: list[replay.TaskKeys]) -> None:
    ids = [UUID(k.task_run_id.decode()) for k in keys]
    with psycopg.connect(url) as conn:
        row = conn.execute(replay.COUNT_SUCCEEDED, (ids,)).fetchone()
    if row is None or row[0] != len(ids):
        raise RuntimeError(f"{row} of {len(ids)} replayed task runs succeeded")


def replay_worker_main(
    url: str,
    captured: Captured,
    warmup: list[replay.TaskKeys],
    timed: list[replay.TaskKeys],
    barrier: Any,
    results: Any,
) -> None:
    """One bare client process replaying the captured cycle for its own task runs."""
    try:
        with closing(replay.BareClient(url, captured.round_trips, captured.keys)) as client:
            results.put(timed_cycles(client.cycle, warmup, timed, barrier))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        barrier.abort()
        results.put(WorkerResult(error=f"{type(exc).__name__}: {exc}"))


def measure_replay_python(url: str, captured: Captured, processes: int, tasks: int) -> Measurement:
    per_process = WARMUP_CYCLES + tasks
    keys = replayed_tasks(url, processes * per_process)
    pg_command(url, CHECKPOINT)
    slices = [keys[i * per_process : (i + 1) * per_process] for i in range(processes)]
    measured = run_workers(replay_worker_main, (url, captured), slices, REPLAY_PYTHON)
    check_replayed(url, keys)
    return measured


def measure_replay_pgbench(
    url: str, pgbench: str, captured: Captured, clients: int, tasks: int, workdir: Path
) -> Measurement:
    """pgbench replaying the cycle ``tasks`` times per client, each on its own rows."""
    keys = replayed_tasks(url, clients * tasks)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(replay.CREATE_KEYS)
        with conn.cursor().copy(replay.COPY_KEYS) as copy:
            for i, key in enumerate(keys):
                client, n = divmod(i, tasks)
                copy.write_row(
                    (
                        client * 1_000_000 + n + 1,
                        key.task_run_id.decode(),
                        key.workflow_run_id.decode(),
                        key.task_key.decode(),
                    )
                )
        conn.execute(CHECKPOINT)
    script, variables = replay.pgbench_script(captured.round_trips, captured.keys)
    try:
        measured = run_pgbench(
            url,
            pgbench,
            REPLAY_PGBENCH,
            workdir / f"replay-c{clients}",
            script,
            {"n": "0", **variables},
            clients,
            f"--transactions={tasks}",
        )
    finally:
        pg_command(url, replay.DROP_KEYS)
    check_replayed(url, keys)
    return measured


def run_workers(
    target: Any, leading: tuple[Any, ...], slices: list[list[Any]], label: str
) -> Measurement:
    """One spawned process per slice (``target(*leading, warmup, timed, barrier,
    results)``), started together at a barrier; their cycles as one measurement."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(slices))
    results = ctx.Queue()
    workers = []
    for i, mine in enumerate(slices):
        args = (*leading, mine[:WARMUP_CYCLES], mine[WARMUP_CYCLES:], barrier, results)
        # Daemonic: if the parent fails (a timeout below), no worker outlives it.
        workers.append(
            ctx.Process(target=target, args=args, name=f"bench-worker-{i}", daemon=True)
        )
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=BARRIER_TIMEOUT_S * 2) for _ in workers]
    for w in workers:
        w.join()

    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise RuntimeError(f"a worker failed: {errors[0]}")
    lost = sum(o.lost for o in outcomes)
    if lost:
        raise RuntimeError(f"{lost} cycles lost")
    latencies = [lat for o in outcomes for lat in o.latencies_us]
    cpu = sum(o.cpu_seconds for o in outcomes)
    start, end = min(o.started for o in outcomes), max(o.ended for o in outcomes)
    return Measurement(
        label,
        len(slices),
        sum(o.cycles for o in outcomes),
        end - start,
        latencies,
        cpu,
        MACHINE_CPU.busy_seconds(start, end),
        end - start,
    )


def measure_sqlite(tasks: int) -> Measurement:
    with (
        tempfile.TemporaryDirectory(prefix="flowforge-bench-") as tmp,
        FlowForge(f"sqlite:///{tmp}/bench.db") as ff,
    ):
        ids = create_ready_tasks(ff, WARMUP_CYCLES + tasks)
        for task_id in ids[:WARMUP_CYCLES]:
            cycle(ff, task_id, "bench")
        latencies: list[float] = []
        started, cpu = time.monotonic(), time.process_time()
        for task_id in ids[WARMUP_CYCLES:]:
            t0 = time.perf_counter_ns()
            if not cycle(ff, task_id, "bench"):
                raise RuntimeError(f"SQLite cycle lost on {task_id}")
            latencies.append((time.perf_counter_ns() - t0) / 1000)
        ended, cpu = time.monotonic(), time.process_time() - cpu
    seconds = ended - started
    machine = MACHINE_CPU.busy_seconds(started, ended)
    return Measurement(SQLITE, 1, len(latencies), seconds, latencies, cpu, machine, seconds)


# --- pgbench: the ceiling ----------------------------------------------------------------


def find_pgbench() -> str:
    found = shutil.which("pgbench") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)), None
    )
    if found is None:
        raise SystemExit("pgbench not found: install PostgreSQL's client tools")
    return found


def setup_pgbench_tables(url: str, clients: int, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in CREATE_BENCH_TABLES:
            conn.execute(statement)
        conn.execute(POPULATE_BENCH_TASK_RUNS, {"clients": clients, "rows": rows})


def measure_pgbench(
    url: str, pgbench: str, label: str, clients: int, seconds: int, workdir: Path
) -> Measurement:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET_BENCH_TASK_RUNS)
        conn.execute(TRUNCATE_BENCH_EVENTS)
        conn.execute(VACUUM_BENCH_TABLES)
        conn.execute(CHECKPOINT)
    name = f"{list(PGBENCH_SCRIPTS).index(label)}-c{clients}"
    measured = run_pgbench(
        url,
        pgbench,
        label,
        workdir / name,
        PGBENCH_SCRIPTS[label],
        PGBENCH_VARIABLES,
        clients,
        f"--time={seconds}",
        hint="; if a client ran out of rows, raise --pgbench-rows",
    )
    written = pg_value(url, COUNT_BENCH_SUCCEEDED)
    if written != measured.cycles:
        raise RuntimeError(
            f"pgbench reported {measured.cycles} cycles but {written} rows finished"
        )
    return measured


def run_pgbench(
    url: str,
    pgbench: str,
    label: str,
    stem: Path,
    script: str,
    variables: dict[str, str],
    clients: int,
    limit: str,
    hint: str = "",
) -> Measurement:
    """``script`` run by pgbench (``limit``: its ``--time`` or ``--transactions``),
    prepared statements, one thread per client; its cycles as a measurement. ``hint``
    ends the error a failed run raises."""
    stem.with_suffix(".sql").write_text(script)
    log_prefix = stem.with_suffix(".log")
    parts = urlsplit(url)
    env = dict(os.environ)
    if parts.password:
        env["PGPASSWORD"] = unquote(parts.password)
    command = [
        pgbench,
        "--no-vacuum",
        "--protocol=prepared",
        f"--client={clients}",
        f"--jobs={clients}",
        limit,
        *(f"--define={name}={value}" for name, value in variables.items()),
        f"--file={stem.with_suffix('.sql')}",
        "--log",
        f"--log-prefix={log_prefix}",
        f"--host={parts.hostname or '127.0.0.1'}",
        f"--port={parts.port or 5432}",
        f"--username={unquote(parts.username or 'postgres')}",
        unquote(parts.path.lstrip("/")),
    ]
    cpu, started = _children_cpu_seconds(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    cpu, ended = _children_cpu_seconds() - cpu, time.monotonic()
    tps, processed = _TPS.search(done.stdout), _PROCESSED.search(done.stdout)
    if done.returncode != 0 or tps is None or processed is None:
        raise RuntimeError(
            f"pgbench failed ({done.returncode}){hint}\n{done.stdout}\n{done.stderr}"
        )
    cycles = int(processed.group(1))
    # Per-transaction log lines: client_id transaction_no latency_us script_no epoch us
    latencies = [
        float(line.split()[2])
        for log in glob.glob(f"{log_prefix}.*")
        for line in Path(log).read_text().splitlines()
    ]
    measured = cycles / float(tps.group(1))  # pgbench's own window, not --time's
    machine = MACHINE_CPU.busy_seconds(started, ended)
    return Measurement(label, clients, cycles, measured, latencies, cpu, machine, ended - started)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- the database ---------------------------------------------------------------------------


def pg_command(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def pg_value(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@contextmanager
def bench_database(args: argparse.Namespace) -> Iterator[str]:
    """The database to measure in: fresh ``flowforge_bench`` unless one is given."""
    if args.database_url:
        try:
            yield args.database_url
        finally:
            if not args.keep:
                with psycopg.connect(args.database_url, autocommit=True) as conn:
                    for statement in DROP_BENCH_TABLES:
                        conn.execute(statement)
        return
    name = sql.Identifier(BENCH_DATABASE)
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(DROP_DATABASE.format(name))
        conn.execute(CREATE_DATABASE.format(name))
    try:
        yield with_database(args.admin_url, BENCH_DATABASE)
    finally:
        if args.keep:
            progress(f"kept database {BENCH_DATABASE}")
        else:
            with psycopg.connect(args.admin_url, autocommit=True) as conn:
                conn.execute(DROP_DATABASE.format(name))


# --- report ---------------------------------------------------------------------------------


def markdown_table(rows: list[Measurement]) -> str:
    ceilings = {m.processes: m.per_second for m in rows if m.system == PGBENCH_SQL_ONLY}
    lines = [
        "| measurement | processes | cycles | cycles/s | p50 ms | p99 ms | of ceiling "
        "| client CPU µs/cycle | machine CPU µs/cycle | machine busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # PostgreSQL rows by process count; SQLite (a different database) last, no ratio.
    for m in sorted(rows, key=lambda m: (m.system == SQLITE, m.processes, _order(m.system))):
        ceiling = ceilings.get(m.processes) if m.system != SQLITE else None
        share = f"{m.per_second / ceiling:.0%}" if ceiling else ""
        lines.append(
            f"| {m.system} | {m.processes} | {m.cycles} | {m.per_second:,.0f} "
            f"| {m.percentile_ms(50):.2f} | {m.percentile_ms(99):.2f} | {share} "
            f"| {m.client_cpu_us_per_cycle:.0f} | {m.machine_cpu_us_per_cycle:.0f} "
            f"| {m.machine_busy:.0%} |"
        )
    return "\n".join(lines)


def _order(system: str) -> int:
    names = [
        *PGBENCH_SCRIPTS,
        REPLAY_PGBENCH,
        BARE_PYTHON,
        REPLAY_PYTHON,
        *(f"FlowForge {v}" for v in VARIANTS.values()),
    ]
    return names.index(system) if system in names else len(names)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.claim_finish",
        description="Claim+finish cycles per second: FlowForge on PostgreSQL vs pgbench.",
    )
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--tasks", type=int, default=1000, help="timed cycles per process (default 1000)"
    )
    parser.add_argument(
        "--database-url",
        help="measure in this existing database (kept; only the bench_* tables are dropped)",
    )
    parser.add_argument(
        "--admin-url",
        default=ADMIN_URL,
        help=f"server and admin database used to create {BENCH_DATABASE} (default %(default)s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench database/tables")
    parser.add_argument(
        "--pgbench-seconds", type=int, default=8, help="pgbench -T per run (default 8)"
    )
    parser.add_argument(
        "--pgbench-rows",
        type=int,
        default=PGBENCH_ROWS_PER_CLIENT,
        help="rows each pgbench client owns; one cycle uses one (default %(default)s)",
    )
    parser.add_argument(
        "--pgbench-scripts",
        nargs="*",
        choices=list(PGBENCH_KEYS),
        default=list(PGBENCH_KEYS),
        help="sql: the ceiling; events: + event INSERTs; lock: + the table lock (default all;"
        " none: skip pgbench)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=list(VARIANTS),
        default=DEFAULT_VARIANTS,
        help="FlowForge variants (default: shipped; none: skip)",
    )
    parser.add_argument(
        "--no-bare",
        dest="bare",
        action="store_false",
        help="skip the bare Python client (one statement per transition)",
    )
    parser.add_argument(
        "--no-replay",
        dest="replay",
        action="store_false",
        help="skip FlowForge's own statements replayed by pgbench and by a bare Python client",
    )
    parser.add_argument(
        "--sqlite-tasks", type=int, default=1000, help="timed SQLite cycles (0: skip)"
    )
    args = parser.parse_args(argv)
    if min(args.processes) < 1 or args.tasks < 1:
        parser.error("--processes and --tasks must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pgbench = find_pgbench() if args.pgbench_scripts or args.replay else ""
    started = time.monotonic()
    MACHINE_CPU.start()
    # Anything else running on the machine shows up here: a busy neighbour halves numbers.
    load_before = os.getloadavg()[0]
    rows: list[Measurement] = []

    def record(m: Measurement) -> None:
        rows.append(m)
        progress(
            f"{m.system}, {m.processes} proc: {m.per_second:,.0f} cycles/s, "
            f"p50 {m.percentile_ms(50):.2f} ms, p99 {m.percentile_ms(99):.2f} ms"
        )

    with (
        bench_database(args) as url,
        tempfile.TemporaryDirectory(prefix="flowforge-pgbench-") as tmp,
    ):
        with FlowForge(url, migrate=True):  # creates the schema, for the bench tables to copy
            pass
        server = pg_value(url, SERVER_VERSION)
        if args.pgbench_scripts or args.bare:
            progress("populating the pgbench tables")
            setup_pgbench_tables(url, max(args.processes), args.pgbench_rows)
        captured: Captured | None = None
        for processes in args.processes:
            for key in args.pgbench_scripts:
                label = PGBENCH_KEYS[key]
                progress(f"{label}, {processes} clients, {args.pgbench_seconds} s")
                record(
                    measure_pgbench(
                        url, pgbench, label, processes, args.pgbench_seconds, Path(tmp)
                    )
                )
            if args.bare:
                progress(f"{BARE_PYTHON}, {processes} processes")
                record(measure_bare(url, processes, args.tasks))
            if args.replay:
                captured = captured or capture(url)
                if pgbench:
                    progress(f"{REPLAY_PGBENCH}, {processes} clients, {args.tasks} cycles each")
                    record(
                        measure_replay_pgbench(
                            url, pgbench, captured, processes, args.tasks, Path(tmp)
                        )
                    )
                progress(f"{REPLAY_PYTHON}, {processes} processes")
                record(measure_replay_python(url, captured, processes, args.tasks))
            for key in args.variants:
                progress(f"FlowForge {VARIANTS[key]}, {processes} processes")
                record(measure_flowforge(url, VARIANTS[key], processes, args.tasks))
    if args.sqlite_tasks:
        progress("FlowForge on SQLite, 1 process")
        record(measure_sqlite(args.sqlite_tasks))

    MACHINE_CPU.stop()
    load_after = os.getloadavg()[0]
    print(
        f"\nclaim+finish cycles, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{os.cpu_count()} CPUs, PostgreSQL {server}, Python {platform.python_version()}; "
        f"total {time.monotonic() - started:.0f} s; 1-min load average "
        f"{load_before:.2f} before, {load_after:.2f} after (the bench itself adds up to "
        f"~{max(args.processes)})\n"
    )
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
