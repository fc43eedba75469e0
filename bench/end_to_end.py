"""End to end: FlowForge as production runs it, measured the way ../shared/peers measures.

    python -m bench.end_to_end                           # all four measurements, ~3 minutes
    python -m bench.end_to_end throughput --shape runs --n 5000 --workers 4
    python -m bench.end_to_end throughput --shape fanout --n 10000
    python -m bench.end_to_end latency --rate 100 --seconds 20
    python -m bench.end_to_end chain --length 20

Every measurement starts the scheduler, the publisher and the workers as real processes
(``python -m flowforge scheduler|publisher|worker``) against PostgreSQL and RabbitMQ, on a
fresh database (``flowforge_bench_e2e``, dropped at the end unless ``--keep``) and a
RabbitMQ topology of its own (deleted at the end).

* **throughput** (the peers' method): enqueue N tasks with no process running (``runs``:
  N one-task runs, one ``start_workflow_run`` each; ``fanout``: one run of N independent
  tasks, one call), then start the processes; processing ends at the latest ``finished_at``
  of a succeeded task, read from the database. Reports enqueue/s, process/s, end to end/s,
  and per task: commits (``pg_stat_database.xact_commit``, this script's own statements
  subtracted; it counts every autocommitted read too), write transactions (transaction
  ids assigned: only a transaction that writes takes one) and events; how many runs
  the scheduler finished (normally a worker's finish does); and the CPU per task of
  each role: producer, scheduler, publisher, workers, PostgreSQL's processes and
  RabbitMQ's (``/proc``, when the servers run on this machine) and the whole machine.
  ``--scheduler-delay S`` starts the scheduler S seconds after the others, so that
  workers finish tasks of runs no scheduler has started yet: the finish must then start
  the run itself, or the scheduler finishes every run (its count shows which).
* **latency**: the processes run first; one producer submits one-task runs at a fixed
  rate (open loop) for a while, after ``--warm-up`` seconds at the same rate that are not
  measured (the first seconds, while the other processes are still starting beside the
  first worker up, measure start-up, not the steady state).
  Ready -> claimed per task from the audit log (both times are the database's clock):
  p50, p99, max. Run it at about half of peak throughput.
* **chain**: one run of a chain of ``--length`` no-op tasks with the processes already
  running; wall time from the run's first event to its ``finished_at``.

Nothing here asserts a time: the numbers are printed (and written as JSON with
``--out``), not checked; the only checks are that every task succeeded exactly once.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika
import psycopg

from bench.cpu import SERVERS, machine_busy_seconds, process_seconds, server_seconds
from flowforge import FlowForge, WorkflowDefinition, load_definition

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Its own database; FLOWFORGE_BENCH_E2E_DATABASE names another (two benches at once).
DATABASE = os.environ.get("FLOWFORGE_BENCH_E2E_DATABASE", "flowforge_bench_e2e")
BROKER_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
HANDLERS = "bench.noop_tasks"
ROOT = Path(__file__).resolve().parent.parent
#: How long a measurement may take before it is declared stuck.
DEADLINE_S = 900.0


@dataclass
class Topology:
    """A RabbitMQ topology of this measurement's own, passed to the processes."""

    name: str = field(default_factory=lambda: f"ffbench-{uuid.uuid4().hex[:8]}")

    def environment(self) -> dict[str, str]:
        return {
            "FLOWFORGE_DISPATCH_EXCHANGE": self.name,
            "FLOWFORGE_DISPATCH_QUEUE": f"{self.name}.tasks",
            "FLOWFORGE_DISPATCH_ROUTING_KEY": f"{self.name}.tasks",
            "FLOWFORGE_DEAD_LETTER_EXCHANGE": f"{self.name}.dlx",
            "FLOWFORGE_DEAD_LETTER_QUEUE": f"{self.name}.dead",
        }

    def delete(self, broker_url: str) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(broker_url))
        try:
            channel = connection.channel()
            names = self.environment()
            for queue in ("FLOWFORGE_DISPATCH_QUEUE", "FLOWFORGE_DEAD_LETTER_QUEUE"):
                channel.queue_delete(names[queue])
            for exchange in ("FLOWFORGE_DISPATCH_EXCHANGE", "FLOWFORGE_DEAD_LETTER_EXCHANGE"):
                channel.exchange_delete(names[exchange])
        finally:
            connection.close()


def database_url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def recreate_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Probe:
    """This script's own autocommit connection: it counts its statements, each a commit
    that ``pg_stat_database`` sees and the per-task figure must not."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.statements = 0

    def one(self, sql: str) -> tuple[Any, ...]:
        self.statements += 1
        row = self.conn.execute(sql).fetchone()
        assert row is not None
        return row

    def commits(self) -> int:
        (value,) = self.one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(value)

    def next_transaction_id(self) -> int:
        """The id the next writing transaction gets (reading it assigns none): the
        difference of two is how many transactions wrote (committed or not) between;
        a read, in autocommit or not, takes no transaction id."""
        (value,) = self.one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return int(value)

    def close(self) -> None:
        self.conn.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Processes:
    """The production processes, each in its own process group, logs in a temp dir."""

    def __init__(self, environment: dict[str, str], *, metrics: bool = False) -> None:
        self.environment = environment
        self.logs = Path(tempfile.mkdtemp(prefix="flowforge-bench-"))
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        #: Each process serves its metrics (--metrics-port): what counting costs.
        self.metrics = metrics

    def start(self, name: str, *args: str) -> None:
        if self.metrics:
            args = (*args, "--metrics-port", str(_free_port()))
        with (self.logs / f"{name}.log").open("wb") as log:
            self.running[name] = subprocess.Popen(
                [sys.executable, "-m", "flowforge", *args],
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_all(
        self, workers: int, concurrency: int, batch: int = 1, scheduler_delay: float = 0.0
    ) -> None:
        """``scheduler_delay``: start the scheduler that many seconds after the others,
        so that workers finish tasks of runs no scheduler has started yet."""
        if not scheduler_delay:
            self.start("scheduler", "scheduler")
        self.start("publisher", "publisher")
        for index in range(workers):
            self.start(
                f"worker-{index}",
                "worker",
                "--tasks",
                HANDLERS,
                "--concurrency",
                str(concurrency),
                "--batch",
                str(batch),
            )
        if scheduler_delay:
            time.sleep(scheduler_delay)
            self.start("scheduler", "scheduler")

    def check_alive(self) -> None:
        for name, process in self.running.items():
            if process.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def cpu_seconds(self) -> dict[str, float]:
        """Each role's CPU seconds so far (the workers summed), from the live processes."""
        seconds: dict[str, float] = {}
        for name, process in self.running.items():
            role = name.split("-", 1)[0]
            seconds[role] = seconds.get(role, 0.0) + process_seconds(process.pid)
        return seconds

    def stop(self) -> dict[str, int]:
        for process in self.running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        codes = {}
        for name, process in self.running.items():
            try:
                codes[name] = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                codes[name] = process.wait()
        return codes


@dataclass
class Deployment:
    """One fresh database + topology + (optionally) the running processes."""

    url: str
    broker_url: str
    topology: Topology
    processes: Processes
    app: FlowForge
    probe: Probe


@contextmanager
def deployment(options: argparse.Namespace) -> Iterator[Deployment]:
    recreate_database(DATABASE)
    url = database_url(DATABASE)
    topology = Topology()
    environment = dict(
        os.environ,
        FLOWFORGE_DATABASE_URL=url,
        FLOWFORGE_BROKER_URL=options.broker_url,
        PYTHONPATH=str(ROOT),
        **topology.environment(),
    )
    subprocess.run([sys.executable, "-m", "flowforge", "db", "init"], env=environment, check=True)
    processes = Processes(environment, metrics=options.metrics)
    app = FlowForge(url)
    probe = Probe(url)
    try:
        yield Deployment(url, options.broker_url, topology, processes, app, probe)
    finally:
        codes = processes.stop()
        app.close()
        probe.close()
        topology.delete(options.broker_url)
        if not options.keep:
            drop_database(DATABASE)
        bad = {name: code for name, code in codes.items() if code != 0}
        if bad:
            print(f"processes exited with {bad}; logs in {processes.logs}", file=sys.stderr)


#: How often the bench asks whether the work is done. The end is the database's last
#: finished_at, not the moment a probe sees it, so a slow probe costs no accuracy; a fast
#: one costs the system it measures: each count scans task_runs and its dead versions
#: (docs/performance.md, "The machine, and how to read a figure").
PROBE_INTERVAL_S = 0.25


def wait_until(probe: Probe, processes: Processes, sql: str, expected: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while probe.one(sql)[0] < expected:
        processes.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sql!r} did not reach {expected} within {DEADLINE_S} s")
        time.sleep(PROBE_INTERVAL_S)


SUCCEEDED_TASKS = "SELECT count(*) FROM task_runs WHERE state = 'succeeded'"
FINISHED_RUNS = "SELECT count(*) FROM workflow_runs WHERE finished_at IS NOT NULL"
RUNS_FINISHED_BY_THE_SCHEDULER = (
    "SELECT count(*) FROM flowforge_events WHERE topic LIKE '%WorkflowRun.Succeeded'"
    " AND convert_from(state, 'UTF8')::jsonb ->> 'actor' = 'scheduler'"
)
ONE_TASK = {"name": "bench_one", "tasks": [{"key": "noop", "type": "noop"}]}


def throughput(options: argparse.Namespace) -> dict[str, Any]:
    n = options.n
    with deployment(options) as d:
        commits_before = d.probe.commits()
        writes_before = d.probe.next_transaction_id()
        busy_before, producer_before = machine_busy_seconds(), time.process_time()
        servers_before = {role: server_seconds(name) for role, name in SERVERS.items()}
        started = time.time()
        if options.shape == "runs":
            definition = load_definition(ONE_TASK)
            for index in range(n):
                d.app.start_workflow_run(definition, {"i": index})
        else:
            tasks = [{"key": f"t{i}", "type": "noop"} for i in range(n)]
            d.app.start_workflow_run({"name": "bench_fanout", "tasks": tasks})
        enqueued = time.time()
        producer = time.process_time() - producer_before
        d.processes.start_all(
            options.workers, options.concurrency, options.batch, options.scheduler_delay
        )
        wait_until(d.probe, d.processes, SUCCEEDED_TASKS, n)
        wait_until(d.probe, d.processes, FINISHED_RUNS, n if options.shape == "runs" else 1)
        cpu = {"producer": producer, **d.processes.cpu_seconds()}
        cpu["machine"] = machine_busy_seconds() - busy_before
        for role, name in SERVERS.items():
            before, after = servers_before[role], server_seconds(name)
            if before is not None and after is not None:
                cpu[role] = after - before
        (last,) = d.probe.one(
            "SELECT extract(epoch FROM max(finished_at)) FROM task_runs WHERE state = 'succeeded'"
        )
        (attempts,) = d.probe.one("SELECT max(attempt) FROM task_runs")
        (events,) = d.probe.one("SELECT count(*) FROM flowforge_events")
        (by_scheduler,) = d.probe.one(RUNS_FINISHED_BY_THE_SCHEDULER)
        codes = d.processes.stop()
        time.sleep(1.0)  # the exited backends' statistics reach pg_stat_database
        writes = d.probe.next_transaction_id() - writes_before
        commits = d.probe.commits() - commits_before - d.probe.statements
    last = float(last)
    return {
        "measurement": "throughput",
        "shape": options.shape,
        "n": n,
        "workers": options.workers,
        "concurrency": options.concurrency,
        "batch": options.batch,
        "metrics": options.metrics,
        "enqueue_per_s": n / (enqueued - started),
        "process_per_s": n / (last - enqueued),
        "end_to_end_per_s": n / (last - started),
        "commits_per_task": commits / n,
        "write_transactions_per_task": writes / n,
        "events_per_task": events / n,
        # Which mode the run took: a worker's finish normally finishes its one-task run.
        "runs_finished_by_the_scheduler": by_scheduler,
        # Each role's own CPU per task; "postgres" and "rabbitmq" are the servers' own
        # (when they run on this machine); "machine" is every core's busy time over the
        # whole measurement (enqueue + process): the rest of it is the kernel and
        # anything else running. Process start-up (imports) is included.
        "cpu_ms_per_task": {role: 1000 * seconds / n for role, seconds in cpu.items()},
        "max_attempt": attempts,
        "exit_codes": codes,
    }


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ready_to_claimed_ms(app: FlowForge, run_id: uuid.UUID) -> float:
    ready = claimed = None
    for entry in app.run_history(run_id):
        if entry.target == "ready" and ready is None:
            ready = entry.at
        if entry.transition == "claim" and claimed is None:
            claimed = entry.at
    if ready is None or claimed is None:
        raise RuntimeError(f"run {run_id} was never claimed")
    return (claimed - ready).total_seconds() * 1000


def submit_at_rate(
    app: FlowForge, definition: WorkflowDefinition, rate: float, seconds: float, tag: str
) -> list[uuid.UUID]:
    """One-task runs submitted open loop at ``rate`` per second for ``seconds``."""
    run_ids = []
    begin = time.monotonic()
    for index in range(int(rate * seconds)):
        pause = begin + index / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        run_ids.append(app.start_workflow_run(definition, {tag: index}))
    return run_ids


def latency(options: argparse.Namespace) -> dict[str, Any]:
    with deployment(options) as d:
        d.processes.start_all(options.workers, options.concurrency, options.batch)
        definition = load_definition(ONE_TASK)
        d.app.start_workflow_run(definition, {"warm": True})  # a worker is up
        wait_until(d.probe, d.processes, FINISHED_RUNS, 1)
        # Steady state only: while the other processes are still starting (importing,
        # filling their pools), claims wait for the CPU; that is start-up, not latency.
        warm = submit_at_rate(d.app, definition, options.rate, options.warm_up, "warm")
        wait_until(d.probe, d.processes, FINISHED_RUNS, len(warm) + 1)
        run_ids = submit_at_rate(d.app, definition, options.rate, options.seconds, "i")
        wait_until(d.probe, d.processes, FINISHED_RUNS, len(warm) + len(run_ids) + 1)
        samples = [ready_to_claimed_ms(d.app, run_id) for run_id in run_ids]
    return {
        "measurement": "latency",
        "rate_per_s": options.rate,
        "warm_up_s": options.warm_up,
        "tasks": len(run_ids),
        "workers": options.workers,
        "ready_to_claimed_ms": {
            "p50": percentile(samples, 0.50),
            "p99": percentile(samples, 0.99),
            "max": max(samples),
            "mean": statistics.fmean(samples),
        },
    }


def chain(options: argparse.Namespace) -> dict[str, Any]:
    length = options.length
    tasks: list[dict[str, Any]] = [{"key": "t0", "type": "noop"}]
    tasks += [
        {"key": f"t{i}", "type": "noop", "depends_on": [f"t{i - 1}"]} for i in range(1, length)
    ]
    with deployment(options) as d:
        d.processes.start_all(options.workers, options.concurrency, options.batch)
        definition = load_definition(ONE_TASK)
        d.app.start_workflow_run(definition, {"warm": True})
        wait_until(d.probe, d.processes, FINISHED_RUNS, 1)
        run_id = d.app.start_workflow_run({"name": "bench_chain", "tasks": tasks})
        wait_until(d.probe, d.processes, FINISHED_RUNS, 2)
        run = d.app.get_workflow_run(run_id)
        first = min(entry.at for entry in d.app.run_history(run_id))
    assert run.state == "succeeded", run
    assert run.finished_at is not None
    return {
        "measurement": "chain",
        "length": length,
        "wall_s": (run.finished_at - first).total_seconds(),
    }


def machine() -> dict[str, Any]:
    with open("/proc/loadavg") as loadavg:
        load = loadavg.read().split()[0]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "load1_at_start": float(load),
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker-url", default=BROKER_URL)
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="threads per worker")
    parser.add_argument("--batch", type=int, default=1, help="dispatches a worker takes at once")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--metrics", action="store_true", help="each process serves --metrics-port (a free one)"
    )
    parser.add_argument("--out", type=Path, help="append the results as JSON lines")
    commands = parser.add_subparsers(dest="command")
    shape = commands.add_parser("throughput")
    shape.add_argument("--shape", choices=["runs", "fanout"], default="runs")
    shape.add_argument("--n", type=int, default=5000)
    shape.add_argument(
        "--scheduler-delay",
        type=float,
        default=0.0,
        help="start the scheduler this many seconds after the publisher and the workers",
    )
    rate = commands.add_parser("latency")
    rate.add_argument("--rate", type=float, default=100.0, help="runs submitted per second")
    rate.add_argument("--seconds", type=float, default=20.0)
    rate.add_argument(
        "--warm-up",
        type=float,
        default=3.0,
        help="seconds at the same rate before the measured ones, not measured",
    )
    length = commands.add_parser("chain")
    length.add_argument("--length", type=int, default=20)
    return parser.parse_args(argv)


MEASUREMENTS = {"throughput": throughput, "latency": latency, "chain": chain}


def main(argv: Sequence[str] | None = None) -> None:
    options = parse(argv)
    # The processes it starts load flowforge compiled, as from a wheel: where
    # PYTHONDONTWRITEBYTECODE is set, each would compile it from source (CPU spent
    # inside the processing window; the peers load theirs compiled).
    compileall.compile_dir(ROOT / "flowforge", quiet=1)
    if options.command is None:  # everything, at the sizes of docs/performance.md
        plan = [
            ["throughput", "--shape", "runs", "--n", "5000"],
            ["throughput", "--shape", "fanout", "--n", "1000"],
            ["throughput", "--shape", "fanout", "--n", "10000"],
            ["latency"],
            ["chain"],
        ]
        base = list(argv if argv is not None else sys.argv[1:])
        for step in plan:
            main([*base, *step])
        return
    result = {**machine(), **MEASUREMENTS[options.command](options)}
    print(json.dumps(result, indent=2, default=str))
    if options.out is not None:
        with options.out.open("a") as out:
            out.write(json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
