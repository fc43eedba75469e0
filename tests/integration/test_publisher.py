"""The outbox and the publisher, against a real PostgreSQL and a real RabbitMQ.

One test per delivery guarantee of the spec ("Delivery guarantees (verified against
RabbitMQ)"). Each test uses its own exchange and queues, deleted afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from flowforge import backoff, errors
from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage, decode_dispatch
from flowforge.app.service import FlowForge
from flowforge.config import BrokerConfig
from flowforge.processes import loop, rabbitmq
from flowforge.processes.outbox_publisher import Publisher
from flowforge.processes.rabbitmq import RabbitDispatchConsumer, RabbitDispatchPublisher
from flowforge.processes.transport import DispatchPublisher
from tests import topology
from tests.helpers import rabbitmqctl, wait_until

WIDE = {
    "name": "wide",
    "tasks": [{"key": f"t{i}", "type": "work"} for i in range(10)],
}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker() -> Iterator[BrokerConfig]:
    with topology.own_topology() as config:
        yield config


def drain_queue(config: BrokerConfig) -> list[DispatchMessage]:
    """Every message on the dispatch queue, acked."""
    consumer = RabbitDispatchConsumer(config, task_types=["work"])
    received = []
    try:
        while (delivery := consumer.get(1.0)) is not None:
            received.append(decode_dispatch(delivery.body))
            delivery.ack()
    finally:
        consumer.close()
    return received


def test_a_confirmed_dispatch_is_on_the_bound_queue_with_the_exact_payload(
    pg_app: FlowForge, broker: BrokerConfig
) -> None:
    run_id = pg_app.start_workflow_run(WIDE)
    publisher = RabbitDispatchPublisher(broker)
    try:
        assert pg_app.publish_pending_dispatches(publisher) == 10
    finally:
        publisher.close()
    assert pg_app.pending_dispatch_count() == 0
    expected = {
        row.dispatch_id: (row.task_run_id, row.task_key, row.task_type, row.fencing_token)
        for task in pg_app.task_runs(run_id)
        for row in pg_app.dispatches_of(task.id)
    }
    received = drain_queue(broker)
    assert {
        m.dispatch_id: (m.task_run_id, m.task_key, m.task_type, m.fencing_token) for m in received
    } == expected
    assert all(
        row.published_at is not None
        for t in pg_app.task_runs(run_id)
        for row in pg_app.dispatches_of(t.id)
    )


def test_an_unroutable_dispatch_raises_and_its_row_stays_pending(
    pg_app: FlowForge, broker: BrokerConfig
) -> None:
    pg_app.start_workflow_run(WIDE)
    publisher = RabbitDispatchPublisher(broker, declare_queue=False)  # no queue bound
    try:
        with pytest.raises(errors.UnroutableDispatchError):
            pg_app.publish_pending_dispatches(publisher)
    finally:
        publisher.close()
    assert pg_app.pending_dispatch_count() == 10


def refusing_queue(config: BrokerConfig, task_type: str) -> None:
    """``task_type``'s queue, bound, taking nothing: the broker nacks every dispatch
    routed to it (a full queue that rejects publishes)."""
    connection = rabbitmq.connect(config, name="flowforge-test-admin")
    try:
        channel = connection.channel()
        channel.exchange_declare(config.exchange, durable=True)
        queue = config.queue_for(task_type)
        channel.queue_declare(
            queue, durable=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
        )
        channel.queue_bind(queue, config.exchange, routing_key=queue)
    finally:
        connection.close()


def test_a_sweep_the_broker_nacks_raises_and_leaves_every_row_pending(
    pg_app: FlowForge, broker: BrokerConfig
) -> None:
    """A publish the broker refused (``PublishNotConfirmedError``) is not delivered:
    the sweep's transaction rolls back and no row is marked published."""
    run_id = pg_app.start_workflow_run(WIDE)
    refusing_queue(broker, "work")
    publisher = RabbitDispatchPublisher(broker, declare_queue=False)
    try:
        with pytest.raises(errors.PublishNotConfirmedError, match="nacked"):
            pg_app.publish_pending_dispatches(publisher)
    finally:
        publisher.close()
    assert pg_app.pending_dispatch_count() == 10
    rows = [row for task in pg_app.task_runs(run_id) for row in pg_app.dispatches_of(task.id)]
    assert [row.published_at for row in rows] == [None] * 10


def test_a_broker_outage_leaves_every_row_pending_and_a_later_sweep_drains_each_once(
    pg_app: FlowForge, broker: BrokerConfig
) -> None:
    pg_app.start_workflow_run(WIDE)
    unreachable = broker.model_copy(update={"url": "amqp://guest:guest@127.0.0.1:1/%2F"})
    down = Publisher(pg_app, lambda: RabbitDispatchPublisher(unreachable))
    with pytest.raises(errors.BrokerUnavailableError, match=r"127\.0\.0\.1:1"):
        down.sweep()
    assert pg_app.pending_dispatch_count() == 10
    up = Publisher(pg_app, lambda: RabbitDispatchPublisher(broker), batch_size=3)
    try:
        assert up.drain() == 10
        assert up.drain() == 0
    finally:
        up.close()
    counts = Counter(m.dispatch_id for m in drain_queue(broker))
    assert len(counts) == 10
    assert set(counts.values()) == {1}


def test_a_row_committed_before_any_publish_is_delivered_by_a_fresh_publisher_process(
    pg_app: FlowForge, postgres_url: str, broker: BrokerConfig
) -> None:
    pg_app.start_workflow_run(WIDE)  # committed; no publisher has run
    script = (
        "from flowforge.app.service import FlowForge\n"
        "from flowforge.config import BrokerConfig\n"
        "from flowforge.processes.outbox_publisher import Publisher\n"
        "from flowforge.processes.rabbitmq import RabbitDispatchPublisher\n"
        "import sys\n"
        "config = BrokerConfig.from_env()\n"
        "publisher = Publisher(FlowForge(sys.argv[1]), lambda: RabbitDispatchPublisher(config))\n"
        "print(publisher.drain())\n"
        "publisher.close()\n"
    )
    env = {**os.environ, **topology.broker_environment(broker)}
    done = subprocess.run(
        [sys.executable, "-c", script, postgres_url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "10"
    assert pg_app.pending_dispatch_count() == 0
    assert len(drain_queue(broker)) == 10


def test_two_publishers_in_parallel_publish_each_row_exactly_once(
    pg_app: FlowForge, postgres_url: str, broker: BrokerConfig
) -> None:
    for _ in range(20):
        pg_app.start_workflow_run(WIDE)  # 200 pending rows
    barrier = threading.Barrier(2)
    published: list[int] = []
    failures: list[BaseException] = []

    def publish() -> None:
        app = FlowForge(postgres_url)
        publisher = Publisher(app, lambda: RabbitDispatchPublisher(broker), batch_size=7)
        try:
            barrier.wait()
            published.append(publisher.drain())
        except BaseException as exc:  # re-raised in the main thread
            failures.append(exc)
        finally:
            publisher.close()
            app.close()

    threads = [threading.Thread(target=publish) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert sum(published) == 200
    counts = Counter(m.dispatch_id for m in drain_queue(broker))
    assert len(counts) == 200
    assert set(counts.values()) == {1}


class MeetingPublisher:
    """A DispatchPublisher that, inside ``publish`` (while its transaction holds its
    rows), waits until the other publisher is inside ``publish`` too."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self._barrier = barrier
        self.sent: list[DispatchMessage] = []

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        self.sent.extend(messages)
        self._barrier.wait()

    def close(self) -> None:
        """Nothing to release."""


def test_two_publishers_hold_disjoint_rows_at_the_same_time_instead_of_queueing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    # SKIP LOCKED, not a plain FOR UPDATE: the second publisher takes other rows while
    # the first still holds its own. With FOR UPDATE it would wait for the first to
    # commit, and the first waits for it at the barrier: the barrier times out.
    for _ in range(2):
        pg_app.start_workflow_run(WIDE)  # 20 pending rows
    barrier = threading.Barrier(2, timeout=15)
    publishers = [MeetingPublisher(barrier), MeetingPublisher(barrier)]
    published: list[int] = []
    failures: list[BaseException] = []

    def sweep(publisher: MeetingPublisher) -> None:
        app = FlowForge(postgres_url)
        try:
            published.append(app.publish_pending_dispatches(publisher, limit=10))
        except BaseException as exc:  # re-raised in the main thread
            failures.append(exc)
        finally:
            app.close()

    threads = [threading.Thread(target=sweep, args=(p,)) for p in publishers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert published == [10, 10]
    first, second = ({m.dispatch_id for m in p.sent} for p in publishers)
    assert len(first) == len(second) == 10
    assert first.isdisjoint(second)
    assert pg_app.pending_dispatch_count() == 0


# --- a returning broker is noticed within about a second ---------------------------------

#: A bound that only ends a broken test; polling stops as soon as the condition holds.
DEADLINE_S = 60.0
#: Failed reconnects to sit through before the broker returns. With the old policy
#: (0.5 s doubling to a 30 s cap) the fifth failure already waits up to 8 s, the sixth
#: up to 16 s; with the new one no wait exceeds RECONNECT_BACKOFF_CAP_S (1 s).
OUTAGE_FAILURES = 6
#: From "the broker has started" to "every row committed during the outage is
#: confirmed": at most one backoff wait (1 s), a reconnect and one batch publish. 5 s
#: leaves room for a loaded two-core machine; the old policy took 18 s in a trial run.
RESUMED_WITHIN_S = 5.0


class RecordingStop(loop.Stop):
    """A stop request that remembers every wait the publisher asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return super().wait(seconds)


@pytest.mark.serial
def test_rows_committed_during_a_broker_outage_are_dispatched_within_seconds_of_its_return(
    pg_app: FlowForge, broker: BrokerConfig
) -> None:
    connects = 0

    def connect() -> DispatchPublisher:
        nonlocal connects
        connects += 1  # a publisher is made lazily: one per attempt after a failure
        return RabbitDispatchPublisher(broker)

    stop = RecordingStop()
    publisher = Publisher(pg_app, connect, interval=0.05, stop=stop)
    thread = threading.Thread(target=publisher.run, name="publisher")
    thread.start()
    try:
        pg_app.start_workflow_run(WIDE)
        wait_until(lambda: pg_app.pending_dispatch_count() == 0, DEADLINE_S, "first dispatches")
        try:
            rabbitmqctl("stop_app")
            before_outage = connects
            pg_app.start_workflow_run(WIDE)  # committed while the broker is away
            wait_until(
                lambda: connects - before_outage >= OUTAGE_FAILURES,
                DEADLINE_S,
                f"{OUTAGE_FAILURES} failed reconnects",
            )
        finally:
            rabbitmqctl("start_app")
            rabbitmqctl("await_startup")
        back = time.monotonic()
        wait_until(lambda: pg_app.pending_dispatch_count() == 0, DEADLINE_S, "the outage's rows")
        resumed_after = time.monotonic() - back
    finally:
        stop.set("test over")
        thread.join(DEADLINE_S)

    assert not thread.is_alive()
    assert resumed_after < RESUMED_WITHIN_S, f"dispatch resumed {resumed_after:.1f} s late"
    assert max(stop.waits) <= backoff.RECONNECT_BACKOFF_CAP_S
    assert len({m.dispatch_id for m in drain_queue(broker)}) == 2 * len(WIDE["tasks"])
