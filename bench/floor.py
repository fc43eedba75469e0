"""The floor: the least a Python client of FlowForge's architecture can cost, end to end.

    python -m bench.floor --n 5000 --workers 4

Not FlowForge: a bare client doing the same durable work per one-task run, measured with
the method of ``../shared/peers`` and ``bench/end_to_end.py`` (enqueue N with nothing
consuming, then start the publisher and the workers; processing ends at the last
finish). It answers one question of issue #10: how fast can *any* Python implementation
of the spec's guarantees go on this machine, so how much of FlowForge's gap to its peers
is its own overhead and how much the architecture's price.

What it keeps, per one-task run (the shared ``task_limit.sql`` shape, on its tables):
three autocommitted single-statement transactions with PostgreSQL's default durability
(start: run, task, two creation events, an outbox row; claim: the conditional write and
its event; finish: the task's and the run's conditional writes and their two events),
events of FlowForge's size, each built *in the statement* from the written row (the
database's clock, the new version and fencing token: what a server-side function per
transition would do, the leanest client possible); a publisher that takes outbox rows
with ``FOR UPDATE SKIP LOCKED`` (500 at a time) and publishes them to a durable quorum
queue, mandatory, waiting for every confirm of the batch together, and marks them
published; workers consuming with prefetch 1 and
manual ack after the finish commits.

What it leaves out, so it is a floor, not a product: no scheduler (the run is running
from its start), no retries, no heartbeat, no wake-ups (the publisher polls every 1 ms),
no run read for the handler, no audit of who did what beyond the events, no validation.

Reports enqueue/s, process/s, end to end/s and CPU per task: each role's own (its
processes' user + system time) and the whole machine's (``/proc/stat``), so what is
left over is PostgreSQL, RabbitMQ and the kernel. Nothing asserts a time; the check is
that exactly N tasks succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import psycopg
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties

from bench.cpu import machine_busy_seconds, process_seconds
from flowforge.processes.rabbitmq.confirms import Confirms, async_channel
from flowforge.processes.rabbitmq.connection import wait_until

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "flowforge_bench_floor"
URL = ADMIN_URL.rsplit("/", 1)[0] + f"/{DATABASE}"
BROKER_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
QUEUE = "flowforge-bench-floor"
ROOT = Path(__file__).resolve().parent.parent
#: The tables of ``../shared/peers/task_limit_schema.sql`` (the pgbench floor), as they are.
SCHEMA = """
DROP TABLE IF EXISTS l_events, l_tasks, l_runs, l_outbox;
CREATE TABLE l_runs (id uuid PRIMARY KEY, state text NOT NULL, version int NOT NULL,
    created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE l_tasks (id uuid PRIMARY KEY, run_id uuid NOT NULL REFERENCES l_runs,
    state text NOT NULL, version int NOT NULL, token int NOT NULL DEFAULT 0, worker text,
    lease_expires_at timestamptz, result json, updated_at timestamptz NOT NULL);
CREATE INDEX ON l_tasks (run_id);
CREATE TABLE l_events (originator_id uuid NOT NULL, originator_version int NOT NULL,
    topic text NOT NULL, state bytea NOT NULL, notification_id bigserial UNIQUE,
    PRIMARY KEY (originator_id, originator_version));
CREATE TABLE l_outbox (dispatch_id uuid PRIMARY KEY, task_run_id uuid NOT NULL,
    published_at timestamptz);
CREATE INDEX ON l_outbox (dispatch_id) WHERE published_at IS NULL;
"""

#: The columns of an event, as FlowForge's transcoder writes them (~400 bytes).
_TASK_EVENT = """convert_to(json_build_object(
    'originator_id', id, 'originator_version', version, 'timestamp', updated_at,
    'state', state, 'source', %(source)s::text, 'actor', %(actor)s::text, 'fencing_token', token,
    'attempt', 1, 'lease_owner', worker, 'lease_expires_at', lease_expires_at,
    'started_at', updated_at, 'finished_at', NULL, 'retry_due_at', NULL,
    'result', result, 'error', NULL)::text, 'UTF8')"""

START = f"""
WITH r AS (INSERT INTO l_runs VALUES (%(run)s, 'running', 1, now(), now())
           RETURNING id, created_at),
     t AS (INSERT INTO l_tasks (id, run_id, state, version, updated_at)
           SELECT %(task)s, id, 'ready', 1, now() FROM r
           RETURNING id, run_id, state, version, token, worker, lease_expires_at, result,
                     updated_at),
     e AS (INSERT INTO l_events (originator_id, originator_version, topic, state)
           SELECT id, 1, 'flowforge.WorkflowRun.Created', convert_to(json_build_object(
               'originator_id', id, 'originator_version', 1, 'timestamp', created_at,
               'workflow_name', 'bench_one', 'definition', %(definition)s::json,
               'inputs', %(inputs)s::json, 'idempotency_key', NULL,
               'actor', 'user')::text, 'UTF8') FROM r
           UNION ALL
           SELECT id, 1, 'flowforge.TaskRun.Created', {_TASK_EVENT} FROM t)
INSERT INTO l_outbox (dispatch_id, task_run_id) SELECT gen_random_uuid(), id FROM t
"""

CLAIM = f"""
WITH t AS (UPDATE l_tasks SET state = 'running', token = token + 1, version = version + 1,
               worker = %(actor)s, lease_expires_at = now() + interval '300 s',
               updated_at = now()
           WHERE id = %(task)s AND state = 'ready'
           RETURNING id, state, version, token, worker, lease_expires_at, result,
                     updated_at),
     e AS (INSERT INTO l_events (originator_id, originator_version, topic, state)
           SELECT id, version, 'flowforge.TaskRun.Claimed', {_TASK_EVENT} FROM t)
SELECT token FROM t
"""

FINISH = f"""
WITH t AS (UPDATE l_tasks SET state = 'succeeded', version = version + 1,
               result = %(result)s::json, lease_expires_at = NULL, updated_at = now()
           WHERE id = %(task)s AND state = 'running' AND token = %(token)s
           RETURNING id, run_id, state, version, token, worker, lease_expires_at, result,
                     updated_at),
     r AS (UPDATE l_runs SET state = 'succeeded', version = version + 1, updated_at = now()
           WHERE id = (SELECT run_id FROM t) AND state = 'running'
           RETURNING id, version, updated_at)
INSERT INTO l_events (originator_id, originator_version, topic, state)
  SELECT id, version, 'flowforge.TaskRun.Succeeded', {_TASK_EVENT} FROM t
  UNION ALL
  SELECT id, version, 'flowforge.WorkflowRun.Succeeded', convert_to(json_build_object(
      'originator_id', id, 'originator_version', version, 'timestamp', updated_at,
      'state', 'succeeded', 'actor', %(actor)s::text)::text, 'UTF8') FROM r
"""

DEFINITION = json.dumps({"name": "bench_one", "tasks": [{"key": "noop", "type": "noop"}]})


def connect() -> psycopg.Connection[Any]:
    return psycopg.connect(URL, autocommit=True, prepare_threshold=0)


def channel() -> tuple[pika.BlockingConnection, BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    ch = connection.channel()
    ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
    return connection, ch


#: Outbox rows one publisher transaction takes, as FlowForge's publisher does by default.
PUBLISH_BATCH = 500
#: How long the broker may take to confirm a batch (or the confirm mode) before it fails.
CONFIRM_TIMEOUT_S = 30.0


def _soon() -> float:
    return time.monotonic() + CONFIRM_TIMEOUT_S


def publisher() -> None:
    """Outbox rows to the queue, every confirm of a batch awaited together, then the
    rows marked; polls every millisecond. The confirms are pipelined on the channel
    under pika's ``BlockingChannel`` (which otherwise waits for each confirm before the
    next publish: the publisher, not the floor, would set the pace)."""
    connection, ch = channel()
    confirms = Confirms(connection)
    confirms.attach(ch)
    wait_until(
        connection,
        lambda: confirms.selected,
        channel_closed=lambda: confirms.closed_reason,
        deadline=_soon(),
    )
    impl = async_channel(ch)
    properties = pika.BasicProperties(delivery_mode=2, content_type="text/plain")
    with connect() as conn:
        while True:
            with conn.transaction():
                rows = conn.execute(
                    "SELECT dispatch_id, task_run_id FROM l_outbox WHERE published_at IS NULL"
                    f" LIMIT {PUBLISH_BATCH} FOR UPDATE SKIP LOCKED"
                ).fetchall()
                confirms.begin()
                for dispatch, task in rows:
                    impl.basic_publish("", QUEUE, str(task).encode(), properties, mandatory=True)
                    confirms.sent(str(dispatch))
                wait_until(
                    connection,
                    lambda: not confirms.outstanding,
                    channel_closed=lambda: confirms.closed_reason,
                    deadline=_soon(),
                )
                if confirms.nacked or confirms.returned:
                    raise RuntimeError(
                        f"{len(confirms.nacked)} nacked and {len(confirms.returned)} returned"
                        f" of {len(rows)} published"
                    )
                if rows:
                    conn.execute(
                        "UPDATE l_outbox SET published_at = now() WHERE dispatch_id = ANY(%s)",
                        [[dispatch for dispatch, _ in rows]],
                    )
            if not rows:
                connection.sleep(0.001)


def worker(name: str) -> None:
    """Claim, run a no-op, finish, ack: one message at a time."""
    _connection, ch = channel()
    ch.basic_qos(prefetch_count=1)
    conn = connect()

    def on_message(
        ch: BlockingChannel, method: Basic.Deliver, _: BasicProperties, body: bytes
    ) -> None:
        task = uuid.UUID(body.decode())
        claimed = conn.execute(CLAIM, {"task": task, "actor": name, "source": "ready"}).fetchone()
        if claimed is not None:
            params = {"task": task, "token": claimed[0], "result": "{}", "actor": name}
            conn.execute(FINISH, {**params, "source": "running"})
        assert method.delivery_tag is not None  # always set on a Basic.Deliver
        ch.basic_ack(method.delivery_tag)

    ch.basic_consume(QUEUE, on_message)
    ch.start_consuming()


def prepare() -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(SCHEMA)
    connection, ch = channel()
    ch.queue_purge(QUEUE)
    connection.close()


def measure(n: int, workers: int) -> dict[str, Any]:
    prepare()
    producer_cpu = time.process_time()
    busy_before = machine_busy_seconds()
    started = time.time()
    with connect() as conn:
        for index in range(n):
            inputs = json.dumps({"i": index})
            conn.execute(
                START,
                {
                    "run": uuid.uuid4(),
                    "task": uuid.uuid4(),
                    "definition": DEFINITION,
                    "inputs": inputs,
                    "source": "none",
                    "actor": "user",
                },
            )
    enqueued = time.time()
    producer_cpu = time.process_time() - producer_cpu
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    roles = [("publisher", "publisher"), *[("worker", f"w{i}") for i in range(workers)]]
    running = [
        (
            role,
            subprocess.Popen([sys.executable, "-m", "bench.floor", "--role", role, name], env=env),
        )
        for role, name in roles
    ]
    cpu: dict[str, float] = {}
    try:
        with connect() as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM l_tasks WHERE state = 'succeeded'"
                ).fetchone()
                assert row is not None
                if row[0] >= n:
                    break
                for role, process in running:
                    if process.poll() is not None:
                        raise RuntimeError(f"{role} exited with {process.returncode}")
                time.sleep(0.02)
            row = conn.execute("SELECT max(updated_at) FROM l_tasks").fetchone()
            assert row is not None
            finished = row[0].timestamp()
            busy = machine_busy_seconds() - busy_before
            for role, process in running:
                cpu[role] = cpu.get(role, 0.0) + process_seconds(process.pid)
            (succeeded,) = conn.execute(
                "SELECT count(*) FROM l_tasks WHERE state = 'succeeded'"
            ).fetchone() or (0,)
            (events,) = conn.execute("SELECT count(*) FROM l_events").fetchone() or (0,)
    finally:
        for _, process in running:
            process.send_signal(signal.SIGKILL)
            process.wait()
    assert succeeded == n, f"{succeeded} tasks succeeded, expected {n}"
    per_task_ms = {role: 1000 * seconds / n for role, seconds in cpu.items()}
    per_task_ms["producer"] = 1000 * producer_cpu / n
    per_task_ms["machine"] = 1000 * busy / n
    return {
        "n": n,
        "workers": workers,
        "enqueue_per_s": n / (enqueued - started),
        "process_per_s": n / (finished - enqueued),
        "end_to_end_per_s": n / (finished - started),
        "events_per_task": events / n,
        "cpu_ms_per_task": per_task_ms,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--role", nargs=2, metavar=("ROLE", "NAME"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.role:
        role, name = options.role
        publisher() if role == "publisher" else worker(name)
        return
    print(json.dumps(measure(options.n, options.workers), indent=2))


if __name__ == "__main__":
    main()
