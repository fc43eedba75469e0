"""What the observer seam, the metrics and the traces add to each task's hot path, in
CPU per task (docs/observability.md, "What it costs").

    python -m bench.telemetry_cost [--n 20000]

End-to-end throughput on this 2-core machine moves by more than the cost being measured
from one run to the next, so this measures the added work itself: each step a worker,
the publisher and a committing writer add per task, timed in a loop in this process
(``time.process_time``, the median of five rounds), through the seam
(``flowforge.observe``) as the domain calls it: with no observer installed (metrics and
traces off: each hook an empty call), with the metrics observer, and with the traces
observer too (an SDK provider recording into the in-memory exporter). Then the pending-outbox
read with its subquery for the runs' trace context against the read without it, on
PostgreSQL (a fresh database ``bench_telemetry``, 500 pending dispatches).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from flowforge import metrics, observe
from flowforge.aggregates.dispatch import dispatch_headers
from flowforge.app import results
from flowforge.app.results import Claim
from flowforge.processes import telemetry
from flowforge.projections.tables import TASK_RUN_COLUMNS, TaskRunRow

ROUNDS = 5


def cpu_us(step: Callable[[], object], n: int) -> float:
    """Median CPU microseconds of one ``step`` over ``ROUNDS`` rounds of ``n``."""
    rounds = []
    for _ in range(ROUNDS):
        began = time.process_time()
        for _ in range(n):
            step()
        rounds.append((time.process_time() - began) / n * 1e6)
    return statistics.median(rounds)


def task_row() -> results.TaskRunView:
    at = datetime.now(UTC)
    row: dict[str, Any] = dict.fromkeys(TASK_RUN_COLUMNS)
    row.update(
        id=uuid.uuid4(),
        workflow_run_id=uuid.uuid4(),
        task_key="extract",
        task_type="noop",
        depends_on=[],
        max_attempts=1,
        state="running",
        fencing_token=1,
        attempt=1,
        lease_expires_at=at + timedelta(seconds=30),
        version=2,
        created_at=at,
        updated_at=at,
        lease_seconds=30.0,
    )
    return results.task_run_view(TaskRunRow.from_mapping(row))


def worker_step(headers: dict[str, str]) -> Callable[[], object]:
    """What a worker adds per attempt: the attempt announced (the latency observation,
    the span opened), made current around the handler, ended; one handler duration; the
    transitions counted."""
    task = task_row()
    claim = Claim.of(task)
    announce = observe.announce

    def step() -> None:
        watch = telemetry.attempt_started(
            task, claim, 30.0, headers, worker_id="w1", began_ns=time.time_ns()
        )
        with watch.current():
            pass
        announce.handler_returned("noop", "succeed", 0.001)
        announce.transitions_committed([("task_run", "claim"), ("task_run", "succeed")])
        watch.end("succeed")

    return step


def publisher_step(context: dict[str, str] | None) -> Callable[[], object]:
    """What a publisher adds per dispatch: its headers, counted published and confirmed."""
    at = datetime.now(UTC)

    def step() -> None:
        dispatch_headers(at, context)
        observe.announce.dispatches_published(1)
        observe.announce.dispatches_confirmed(1)

    return step


def run_span_step() -> object:
    """What a run's creation adds: its span, and the context it stores."""
    with observe.announce.run_creation("bench", "user") as trace:
        trace.created(uuid.uuid4(), True)
    return trace.context


def python_costs(n: int) -> None:
    from tests.spans import recorded

    ready = dispatch_headers(datetime.now(UTC), None)
    print("per task, CPU µs (median of 5 rounds)")
    print(f"  worker, metrics off, traces off: {cpu_us(worker_step(ready), n):7.1f}")
    print(f"  publisher, metrics off:          {cpu_us(publisher_step(None), n):7.1f}")
    print(f"  run's creation, traces off:      {cpu_us(run_span_step, n):7.1f}")
    metrics.enable()
    print(f"  worker, metrics on, traces off:  {cpu_us(worker_step(ready), n):7.1f}")
    print(f"  publisher, metrics on:           {cpu_us(publisher_step(None), n):7.1f}")
    with recorded() as spans:
        with observe.announce.run_creation("bench", "user") as trace:
            context = trace.context
        assert context is not None
        traced = dispatch_headers(datetime.now(UTC), context)
        print(f"  worker, metrics on, traces on:   {cpu_us(worker_step(traced), n // 4):7.1f}")
        spans.clear()
        print(f"  run's creation, traces on:       {cpu_us(run_span_step, n // 4):7.1f}")
        spans.clear()


def outbox_read_cost() -> None:
    from bench.end_to_end import database_url, drop_database, recreate_database
    from flowforge.app.service import FlowForge

    name = "bench_telemetry"
    recreate_database(name)
    app = FlowForge(database_url(name), migrate=True)
    try:
        one = {"name": "one", "tasks": [{"key": "a", "type": "noop"}]}
        app.start_workflow_runs(one, [{}] * 500)
        print("pending-outbox read of 500 rows, ms (median of 50):")
        for label, sql in [
            (
                "without the trace context",
                "SELECT * FROM dispatch_outbox o WHERE "
                "o.published_at IS NULL ORDER BY o.created_at LIMIT 500",
            ),
            (
                "with its subquery",
                "SELECT o.*, (SELECT r.trace_context FROM task_runs t "
                "JOIN workflow_runs r ON r.id = t.workflow_run_id WHERE t.id = o.task_run_id)"
                " AS trace_context FROM dispatch_outbox o WHERE o.published_at IS NULL "
                "ORDER BY o.created_at LIMIT 500",
            ),
        ]:
            print(f"  {label:28} {app_sql_ms(database_url(name), sql):6.2f}")
    finally:
        app.close()
        drop_database(name)


def app_sql_ms(url: str, sql: str) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(5):
            conn.execute(sql).fetchall()
        times = []
        for _ in range(50):
            began = time.perf_counter()
            conn.execute(sql).fetchall()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    python_costs(args.n)
    outbox_read_cost()


if __name__ == "__main__":
    main()
