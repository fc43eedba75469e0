"""The worker through real faults while a handler runs: a database outage during the
outcome write (PostgreSQL refusing and terminating connections), of one delivery and of a
batch (``--batch``), and a broker connection killed mid-handler (RabbitMQ closing every
connection of the test's own vhost).

What each proves is in docs/worker.md ("Faults while a task runs"). The worker runs in a
thread of the test process; the handlers count their calls outside the engine.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from uuid import UUID

import pika
import psycopg
import pytest

from flowforge.aggregates.dispatch import decode_dispatch
from flowforge.app.service import FlowForge
from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import RabbitDispatchConsumer, RabbitDispatchPublisher
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.transport import (
    InMemoryDispatchChannel,
    InMemoryDispatchConsumer,
    SettleAction,
)
from flowforge.processes.worker import Worker
from tests import servers, topology
from tests.helpers import rabbitmqctl, wait_until

T = TypeVar("T")
#: The bound on every wait for something that happens within a second or two.
WAIT_S = 60.0
ONE = {"name": "one", "retry": {"max_attempts": 3}, "tasks": [{"key": "only", "type": "held"}]}


class Held:
    """A handler whose first call blocks until released; it counts every call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.order: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.registry = TaskRegistry()
        self.registry.task("held")(self.run)
        self._lock = threading.Lock()

    def run(self, ctx: TaskContext) -> dict[str, Any]:
        with self._lock:
            self.calls[ctx.task_key] += 1
            first = sum(self.calls.values()) == 1
            self.order.append(f"start {ctx.task_key}")
        if first:
            self.started.set()
            assert self.release.wait(WAIT_S), "the test never released the handler"
        with self._lock:
            self.order.append(f"end {ctx.task_key}")
        return {"token": ctx.fencing_token}


class WorkerThread:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.failures: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name=f"worker-{worker.worker_id}")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # inspected in the test's thread
            self.failures.append(exc)

    def stop(self) -> None:
        self.worker.stop.set("test")
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.failures == []


def logged(caplog: pytest.LogCaptureFixture, message: str) -> bool:
    return any(r.getMessage() == message for r in caplog.records)


def transitions(app: FlowForge, task_run_id: UUID) -> list[str]:
    return [e.transition for e in app.history(task_run_id) if e.transition != "renew_lease"]


def quietly(probe: Callable[[], T]) -> Callable[[], T | None]:
    """``probe``, or None while the database (or the test's pool) is still recovering."""

    def attempt() -> T | None:
        try:
            return probe()
        except Exception:
            return None

    return attempt


# --- the database goes away during the outcome write -----------------------------------


class Outage:
    """Refuses and terminates every connection to one PostgreSQL database, until ended."""

    def __init__(self, url: str) -> None:
        self.dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        self.admin = (
            f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:"
            f"{servers.POSTGRES_PORT}/{servers.POSTGRES_ADMIN_DB}"
        )

    def begin(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{self.dbname}" ALLOW_CONNECTIONS false')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (self.dbname,),
            )

    def end(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{self.dbname}" ALLOW_CONNECTIONS true')


@pytest.fixture
def outage(postgres_url: str) -> Iterator[Outage]:
    outage = Outage(postgres_url)
    try:
        yield outage
    finally:
        outage.end()


@pytest.fixture
def held() -> Held:
    return Held()


def start_worker(
    app: FlowForge, channel: InMemoryDispatchChannel, held: Held, **options: Any
) -> WorkerThread:
    worker = Worker(app, channel.consumer, registry=held.registry, worker_id="w-1", **options)
    return WorkerThread(worker)


def one_published(app: FlowForge, channel: InMemoryDispatchChannel, **extra: Any) -> UUID:
    """A one-task run whose dispatch is on ``channel``; the task's id."""
    (task,) = app.task_runs(app.start_workflow_run({**ONE, **extra}))
    app.publish_pending_dispatches(channel.publisher())
    return task.id


def wait_written_and_acked(
    app: FlowForge, task_id: UUID, channel: InMemoryDispatchChannel
) -> None:
    wait_until(
        quietly(lambda: app.get_task_run(task_id).state == "succeeded"),
        WAIT_S,
        "the outcome was never written",
    )
    # Settled and not back on the queue: an attempt the worker stopped waiting for may
    # land first, and the requeued dispatch is then acked as already written.
    wait_until(
        lambda: channel.unsettled_count == channel.ready_count == 0,
        WAIT_S,
        "the dispatch was never acked",
    )


@pytest.mark.postgres
def test_an_outcome_write_that_fails_while_the_database_is_down_is_retried_and_runs_once(
    pg_app: FlowForge, outage: Outage, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    channel = InMemoryDispatchChannel()
    task_id = one_published(pg_app, channel)
    worker = start_worker(pg_app, channel, held)
    try:
        assert held.started.wait(WAIT_S)
        outage.begin()
        held.release.set()  # the handler returns; the database refuses its outcome
        wait_until(lambda: logged(caplog, "outcome write failed; retrying"), WAIT_S, "no retry")
        assert channel.unsettled_count == 1  # held, not requeued, while retrying
        outage.end()
        wait_written_and_acked(pg_app, task_id, channel)
    finally:
        held.release.set()
        worker.stop()
    assert held.calls == {"only": 1}
    assert transitions(pg_app, task_id) == ["create", "claim", "succeed"]
    assert channel.ready_count == 0
    assert not logged(caplog, "database unavailable; dispatch requeued")


@pytest.mark.postgres
def test_an_outcome_not_written_in_time_is_requeued_and_written_by_its_redelivery(
    pg_app: FlowForge, outage: Outage, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    channel = InMemoryDispatchChannel()
    task_id = one_published(pg_app, channel)
    # Patience shorter than the outage: the worker must give up and requeue.
    worker = start_worker(pg_app, channel, held, outcome_patience=0.2)
    try:
        assert held.started.wait(WAIT_S)
        outage.begin()
        held.release.set()
        wait_until(
            lambda: logged(caplog, "outcome not written; kept for the redelivery"), WAIT_S, ""
        )
        # Requeued, never acked: the message comes back and the worker takes it again.
        wait_until(lambda: logged(caplog, "database unavailable; dispatch requeued"), WAIT_S, "")
        outage.end()
        wait_written_and_acked(pg_app, task_id, channel)
    finally:
        held.release.set()
        worker.stop()
    assert held.calls == {"only": 1}  # the redelivery wrote the outcome; it did not re-run
    assert transitions(pg_app, task_id) == ["create", "claim", "succeed"]
    assert channel.ready_count == 0


class SettlementsNoted(InMemoryDispatchChannel):
    """The in-process channel, noting each settlement it performed: (task run, action),
    in order."""

    def __init__(self) -> None:
        super().__init__()
        self.settled: list[tuple[UUID, SettleAction]] = []

    def settle(self, consumer: InMemoryDispatchConsumer, tag: int, action: SettleAction) -> None:
        entry = self._unsettled.get(tag)
        super().settle(consumer, tag, action)
        if entry is not None:
            self.settled.append((decode_dispatch(entry.body).task_run_id, action))

    def actions(self, task_run_id: UUID) -> list[SettleAction]:
        return [action for task, action in list(self.settled) if task == task_run_id]


PAIR_HELD = {
    "name": "pair",
    "retry": {"max_attempts": 3},
    "tasks": [{"key": "a", "type": "held"}, {"key": "b", "type": "held"}],
}


@pytest.mark.postgres
def test_a_batch_not_written_in_time_is_requeued_whole_and_written_once_by_its_redeliveries(
    pg_app: FlowForge, outage: Outage, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    channel = SettlementsNoted()
    run_id = pg_app.start_workflow_run(PAIR_HELD)
    tasks = {task.task_key: task.id for task in pg_app.task_runs(run_id)}
    # Both dispatches wait when the worker takes its first: they are one batch of two.
    assert pg_app.publish_pending_dispatches(channel.publisher()) == 2
    worker = WorkerThread(
        Worker(
            pg_app,
            lambda: channel.consumer(prefetch=2),
            registry=held.registry,
            worker_id="w-batch",
            outcome_patience=0.2,  # shorter than the outage: the batch must give up
            batch=2,
        )
    )
    try:
        assert held.started.wait(WAIT_S)
        outage.begin()
        held.release.set()  # both handlers return; the database refuses both outcomes
        wait_until(
            lambda: all(channel.actions(task) for task in tasks.values()),
            WAIT_S,
            "the batch's deliveries were never settled",
        )
        # Requeued, never acked: each outcome is kept for its dispatch's redelivery.
        assert {key: channel.actions(task)[0] for key, task in tasks.items()} == {
            "a": "requeue",
            "b": "requeue",
        }
        assert logged(caplog, "batched outcome write failed; writing each on its own")
        assert logged(caplog, "outcome not written; kept for the redelivery")
        outage.end()
        wait_until(
            quietly(lambda: {t.state for t in pg_app.task_runs(run_id)} == {"succeeded"}),
            WAIT_S,
            "the outcomes were never written",
        )
        wait_until(
            lambda: channel.unsettled_count == channel.ready_count == 0,
            WAIT_S,
            "the redeliveries were never acked",
        )
    finally:
        held.release.set()
        worker.stop()
    assert held.calls == {"a": 1, "b": 1}  # the redeliveries wrote the outcomes, not re-ran
    for key, task in tasks.items():
        assert transitions(pg_app, task) == ["create", "claim", "succeed"], key
        actions = channel.actions(task)
        assert actions[-1] == "ack" and set(actions[:-1]) == {"requeue"}, (key, actions)
    assert channel.dead_letters == []


@pytest.mark.postgres
def test_a_worker_stopped_during_an_outage_requeues_and_the_reaper_reruns_the_task(
    pg_app: FlowForge,
    postgres_url: str,
    outage: Outage,
    held: Held,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What the worker does NOT promise: a stop abandons the unwritten outcome (it lives
    # in the stopping process's memory). The dispatch is requeued, never acked; the task
    # stays running until its lease expires, then the reaper makes it ready again and
    # another worker runs the handler a second time, with a newer token.
    channel = InMemoryDispatchChannel()
    task_id = one_published(pg_app, channel, lease_seconds=1)
    # The stopping worker's process exits: its pool goes, and with it the write attempt
    # it stopped waiting for (here its own app, closed after the stop).
    stopping = FlowForge(postgres_url)
    first = start_worker(stopping, channel, held)
    try:
        assert held.started.wait(WAIT_S)
        outage.begin()
        held.release.set()
        wait_until(lambda: logged(caplog, "outcome write failed; retrying"), WAIT_S, "no retry")
        first.stop()  # returns at once: the retry's wait wakes on the stop
        stopping.close()
    finally:
        held.release.set()
        outage.end()
    assert channel.ready_count == 1  # requeued, not acked
    second = start_worker(pg_app, channel, held)
    try:
        wait_until(lambda: channel.ready_count == 0 and channel.unsettled_count == 0, WAIT_S, "")
        wait_until(quietly(lambda: pg_app.schedule_once().reaped), WAIT_S, "never reaped")
        pg_app.publish_pending_dispatches(channel.publisher())
        wait_written_and_acked(pg_app, task_id, channel)
    finally:
        second.stop()
    assert held.calls == {"only": 2}
    assert transitions(pg_app, task_id) == ["create", "claim", "reap_lease", "claim", "succeed"]
    assert pg_app.get_task_run(task_id).result == {"token": 3}


# --- the broker connection dies while a handler runs ------------------------------------


@pytest.fixture
def own_vhost() -> Iterator[BrokerConfig]:
    """A topology in a vhost of the test's own, so killing its connections kills no one
    else's."""
    servers.require_rabbitmq()
    vhost = f"ff-test-{uuid.uuid4().hex[:10]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        base = topology.unique_broker_config()
        url = base.url.rsplit("/", 1)[0] + "/" + urllib.parse.quote(vhost, safe="")
        yield base.model_copy(update={"url": url})
    finally:
        rabbitmqctl("delete_vhost", vhost)


def queue_depth(config: BrokerConfig) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(config.url))
    try:
        declared = connection.channel().queue_declare(config.queue_for("held"), passive=True)
        return int(declared.method.message_count or 0)
    finally:
        connection.close()


PAIR = {
    "name": "pair",
    "lease_seconds": 1.5,
    "tasks": [{"key": "a", "type": "held"}, {"key": "b", "type": "held"}],
}


@pytest.mark.serial
@pytest.mark.postgres
def test_a_broker_connection_lost_mid_handler_keeps_the_heartbeat_and_writes_the_outcome(
    pg_app: FlowForge, own_vhost: BrokerConfig, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    run_id = pg_app.start_workflow_run(PAIR)
    publisher = RabbitDispatchPublisher(own_vhost)
    try:
        assert pg_app.publish_pending_dispatches(publisher) == 2
    finally:
        publisher.close()
    worker = Worker(
        pg_app,
        lambda: RabbitDispatchConsumer(own_vhost, task_types=["held"]),
        registry=held.registry,
        worker_id="w",
    )
    running = WorkerThread(worker)
    try:
        assert held.started.wait(WAIT_S)
        (first,) = [t for t in pg_app.task_runs(run_id) if t.state == "running"]
        vhost = urllib.parse.unquote(own_vhost.url.rsplit("/", 1)[1])
        rabbitmqctl("close_all_connections", "-p", vhost, "killed by the fault test")
        wait_until(
            lambda: logged(
                caplog, "broker connection lost while a task runs; finishing the task first"
            ),
            WAIT_S,
            "the worker never noticed the lost connection",
        )
        renewed = len(pg_app.history(first.id))
        # The heartbeat goes on: two more renewals (every lease/3 = 0.5 s) after the loss.
        wait_until(
            lambda: len(pg_app.history(first.id)) >= renewed + 2, WAIT_S, "heartbeat stopped"
        )
        # ... and the worker took no new message while its handler still runs.
        assert held.order == [f"start {first.task_key}"]
        held.release.set()
        wait_until(
            lambda: {t.state for t in pg_app.task_runs(run_id)} == {"succeeded"},
            WAIT_S,
            "not done",
        )
        wait_until(
            lambda: logged(caplog, "duplicate or stale dispatch acked without running"),
            WAIT_S,
            "the redelivered dispatch was never acked as done",
        )
    finally:
        held.release.set()
        running.stop()
    assert held.calls == {"a": 1, "b": 1}
    assert held.order.index(f"end {first.task_key}") < held.order.index(
        f"start {'b' if first.task_key == 'a' else 'a'}"
    )
    assert transitions(pg_app, first.id) == ["create", "claim", "succeed"]
    assert queue_depth(own_vhost) == 0  # every message acked, the redelivery included
