"""The upgrade from the single dispatch queue to one queue per task type, with
dispatches in flight: nothing lost, nothing run twice (docs/deployment.md, "Upgrading
to per-type queues").

A deployment of the FlowForge before routing is reproduced on a real broker: its one
quorum queue, bound with the old routing key, holding every dispatch, one of them held
unacked by an old worker. ``flowforge broker migrate`` runs while that worker still
holds it, then again once it is gone; new workers then run every task exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pika
import pytest

from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage
from flowforge.app.service import FlowForge
from flowforge.bootstrap import Processes, Transport
from flowforge.cli.exits import EXIT_FAILED
from flowforge.cli.main import main
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq
from flowforge.processes.loop import Stop
from flowforge.processes.registry import TaskRegistry
from flowforge.processes.supervisor import Supervisor
from tests import topology
from tests.helpers import wait_until

DEADLINE_S = 60.0
TYPES = ("alpha", "beta")
WORKFLOW: dict[str, Any] = {
    "name": "mixed",
    "tasks": [{"key": f"{t}{i}", "type": t} for t in TYPES for i in range(3)],
}


class SingleQueuePublisher:
    """Publishes as a FlowForge before routing did: every dispatch to the one queue,
    with the old routing key, confirmed and mandatory."""

    def __init__(self, config: BrokerConfig) -> None:
        self.connection = rabbitmq.connect(config, name="old-flowforge")
        self.channel = self.connection.channel()
        self.config = config
        rabbitmq.declare_dispatch_queue(self.channel, config)  # exchanges and dead letters
        arguments = rabbitmq.dispatch_queue_arguments(config)
        self.channel.queue_declare(config.queue, durable=True, arguments=arguments)
        self.channel.queue_bind(config.queue, config.exchange, routing_key=config.routing_key)
        self.channel.confirm_delivery()

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        for message in messages:
            self.channel.basic_publish(
                self.config.exchange,
                self.config.routing_key,
                message.encode(),
                pika.BasicProperties(delivery_mode=2),
                mandatory=True,
            )

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def broker() -> Iterator[BrokerConfig]:
    with topology.own_topology("ff-upgrade") as config:
        yield config


def depth(config: BrokerConfig, queue: str) -> int | None:
    """Ready messages on ``queue``; None if it does not exist."""
    connection = rabbitmq.connect(config, name="test-depth")
    try:
        declared = connection.channel().queue_declare(queue, passive=True)
        return int(declared.method.message_count or 0)
    except pika.exceptions.ChannelClosedByBroker:
        return None
    finally:
        if connection.is_open:
            connection.close()


def migrate_with_the_cli(
    config: BrokerConfig, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> int:
    for variable, value in topology.broker_environment(config).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("FLOWFORGE_DATABASE_URL", database_url)
    return main(["broker", "migrate"])


def test_dispatches_in_flight_move_to_their_types_queues_and_each_task_runs_once(
    pg_app: FlowForge,
    postgres_url: str,
    broker: BrokerConfig,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = pg_app.start_workflow_run(WORKFLOW)
    old = SingleQueuePublisher(broker)
    try:
        assert pg_app.publish_pending_dispatches(old) == 6
    finally:
        old.close()
    # An old worker (prefetch 1) holds one dispatch unacked while the upgrade starts.
    old_worker = rabbitmq.connect(broker, name="old-worker")
    held = old_worker.channel()
    held.basic_qos(prefetch_count=1)
    deliveries: list[bytes] = []
    held.basic_consume(broker.queue, lambda *message: deliveries.append(message[3]))

    def delivered() -> bool:
        old_worker.process_data_events(time_limit=1)
        return bool(deliveries)

    wait_until(delivered, 30, "the old worker received nothing")

    assert migrate_with_the_cli(broker, postgres_url, monkeypatch) == EXIT_FAILED
    out = capsys.readouterr().out
    moved = {
        line.split()[-1]: int(line.split()[1]) for line in out.splitlines() if "moved" in line
    }
    assert sum(moved.values()) == 5  # all but the one in flight
    assert set(moved) <= {broker.queue_for(t) for t in TYPES}
    assert f"kept {broker.queue}: 1 consumers (workers of the old FlowForge)" in out, out

    old_worker.close()  # the old worker stops without acking: its dispatch goes back
    assert migrate_with_the_cli(broker, postgres_url, monkeypatch) == 0
    out = capsys.readouterr().out
    assert f"deleted {broker.queue}: the migration is complete" in out
    assert depth(broker, broker.queue) is None
    assert sum(depth(broker, broker.queue_for(t)) or 0 for t in TYPES) == 6

    # A migration that died between its confirm and its ack leaves a copy in both
    # queues; moved again, the copy is a duplicate dispatch, which the claim absorbs.
    duplicate = rabbitmq.RabbitDispatchPublisher(broker)
    (first,) = pg_app.dispatches_of(pg_app.task_runs(run_id)[0].id)
    try:
        duplicate.publish([_message(pg_app, first.task_run_id)])
    finally:
        duplicate.close()

    _run_new_workers(pg_app, broker, run_id)
    claims = [e for e in pg_app.run_history(run_id) if e.transition == "claim"]
    assert sorted((e.aggregate_id, e.attempt) for e in claims) == sorted(
        (task.id, 1) for task in pg_app.task_runs(run_id)
    )
    assert all(depth(broker, broker.queue_for(t)) == 0 for t in TYPES)


def test_migrating_a_broker_without_the_old_queue_changes_nothing(
    pg_app: FlowForge,
    postgres_url: str,
    broker: BrokerConfig,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert migrate_with_the_cli(broker, postgres_url, monkeypatch) == 0
    assert capsys.readouterr().out == f"no queue {broker.queue}: nothing to migrate\n"


def test_a_message_on_the_old_queue_that_is_no_dispatch_is_dead_lettered(
    broker: BrokerConfig,
) -> None:
    old = SingleQueuePublisher(broker)
    try:
        old.channel.basic_publish(broker.exchange, broker.routing_key, b"\x00poison")
    finally:
        old.close()
    done = rabbitmq.migrate_single_queue(broker)
    assert (done.moved, done.dead_lettered, done.deleted) == ({}, 1, True)
    assert depth(broker, broker.dead_letter_queue) == 1


def _message(app: FlowForge, task_run_id: uuid.UUID) -> DispatchMessage:
    task = app.get_task_run(task_run_id)
    return DispatchMessage(
        dispatch_id=uuid.uuid4(),
        task_run_id=task.id,
        task_key=task.task_key,
        task_type=task.task_type,
        fencing_token=task.fencing_token,
        deployment=app.deployment_id,
    )


def _run_new_workers(app: FlowForge, broker: BrokerConfig, run_id: uuid.UUID) -> None:
    """The upgraded deployment: a scheduler, a publisher and a worker per type."""
    stop = Stop()
    supervisor = Supervisor(stop)
    handlers = TaskRegistry()
    for task_type in TYPES:
        handlers.task(task_type)(lambda ctx: "done")
    processes = Processes(app, Transport.rabbitmq(broker), handlers, stop)
    supervisor.spawn("scheduler", processes.scheduler(interval=0.2).run)
    supervisor.spawn("publisher", processes.publisher(interval=0.05).run)
    for task_type in TYPES:
        worker = processes.worker(f"w-{task_type}", task_types=[task_type])
        supervisor.spawn(worker.worker_id, worker.run)
    try:
        wait_until(
            lambda: app.get_workflow_run(run_id).state == "succeeded" or None,
            DEADLINE_S,
            "the run did not succeed after the upgrade",
        )
    finally:
        stop.set("test over")
        assert supervisor.join(grace=30) == []
        assert supervisor.errors == []
