"""A worker the composition root wires (``Processes.worker``) holds at most its batch of
dispatches unacked: the consumer's prefetch is the batch, so the dispatches beyond it
wait on the queue for any other worker instead of behind this one's handler. Real
RabbitMQ and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from flowforge.app.service import FlowForge
from flowforge.bootstrap import Processes, Transport
from flowforge.config import BrokerConfig
from flowforge.processes.loop import Stop
from flowforge.processes.rabbitmq import RabbitDispatchConsumer, RabbitDispatchPublisher, connect
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.supervisor import Supervisor
from tests import topology
from tests.helpers import one_task

pytestmark = [pytest.mark.postgres, pytest.mark.rabbitmq]

BATCH = 2
WAITING = 5
#: How long a step may take before the test fails (every wait ends on an event first).
DEADLINE_S = 30.0


def test_a_batched_worker_holds_no_more_dispatches_than_its_batch(pg_app: FlowForge) -> None:
    entered, release = threading.Event(), threading.Event()
    handlers = TaskRegistry()

    @handlers.task("work")
    def hold(ctx: TaskContext) -> dict[str, Any]:
        entered.set()
        release.wait(DEADLINE_S)
        return {"ok": True}

    with topology.own_topology("ff-prefetch") as broker:
        for i in range(WAITING):
            pg_app.start_workflow_run(one_task("t"), {"i": i})
        publisher = RabbitDispatchPublisher(broker)
        try:
            assert pg_app.publish_pending_dispatches(publisher) == WAITING
        finally:
            publisher.close()
        stop = Stop()
        supervisor = Supervisor(stop)
        worker = Processes(pg_app, Transport.rabbitmq(broker), handlers, stop).worker(
            "w-prefetch", batch=BATCH
        )
        supervisor.spawn("worker", worker.run)
        other = RabbitDispatchConsumer(broker, task_types=["work"])
        try:
            assert entered.wait(DEADLINE_S), "the worker never ran a handler"
            # The worker's handler holds its batch; every other dispatch is on the queue.
            for _ in range(WAITING - BATCH):
                delivery = other.get(DEADLINE_S)
                assert delivery is not None, "a dispatch beyond the batch is held by the worker"
                delivery.ack()
        finally:
            other.close()
            release.set()
            stop.set("test over")
            assert supervisor.join(grace=DEADLINE_S) == []


TYPES = ("extract", "load")


def _ready(broker: BrokerConfig) -> int:
    """Messages the broker has not handed out, on both types' queues (passive declare)."""
    connection = connect(broker, name="flowforge-test-admin")
    try:
        channel = connection.channel()
        return sum(
            int(channel.queue_declare(broker.queue_for(t), passive=True).method.message_count or 0)
            for t in TYPES
        )
    finally:
        connection.close()


@pytest.mark.parametrize("batch", [1, BATCH])
def test_a_worker_of_two_types_holds_no_more_dispatches_than_its_batch(
    pg_app: FlowForge, batch: int
) -> None:
    """Routing by type: a worker slot consuming K = 2 type queues holds at most its batch
    (1 by default) unacked, not one per queue; the broker's own count says so while the
    handler holds the slot."""
    entered, release = threading.Event(), threading.Event()
    handlers = TaskRegistry()

    def hold(ctx: TaskContext) -> dict[str, Any]:
        entered.set()
        release.wait(DEADLINE_S)
        return {"ok": True}

    for task_type in TYPES:
        handlers.task(task_type)(hold)
    with topology.own_topology("ff-prefetch-k") as broker:
        for task_type in TYPES:
            for i in range(WAITING):
                pg_app.start_workflow_run(one_task("t", task_type), {"i": i})
        publisher = RabbitDispatchPublisher(broker)
        try:
            assert pg_app.publish_pending_dispatches(publisher) == WAITING * len(TYPES)
        finally:
            publisher.close()
        stop = Stop()
        supervisor = Supervisor(stop)
        worker = Processes(pg_app, Transport.rabbitmq(broker), handlers, stop).worker(
            "w-prefetch-k", batch=batch
        )
        supervisor.spawn("worker", worker.run)
        try:
            assert entered.wait(DEADLINE_S), "the worker never ran a handler"
            assert _ready(broker) == WAITING * len(TYPES) - batch
        finally:
            release.set()
            stop.set("test over")
            assert supervisor.join(grace=DEADLINE_S) == []
