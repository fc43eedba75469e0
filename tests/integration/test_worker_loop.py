"""The worker's and the publisher's loops: reconnect backoff, stop, and what they never retry.

The backoff's bookkeeping is driven by a scripted consumer and a fake clock (the loop's
decision, not the broker's behaviour, is under test); the stop and the queue-type
mismatch use a real RabbitMQ (an unreachable port, a real classic queue).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pika
import pytest

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage
from flowforge.app.service import FlowForge
from flowforge.backoff import RECONNECT_BACKOFF_RESET_AFTER_S, Backoff
from flowforge.config import BrokerConfig
from flowforge.processes.outbox_publisher import Publisher
from flowforge.processes.rabbitmq import RabbitDispatchConsumer, RabbitDispatchPublisher
from flowforge.processes.transport import Delivery, InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests import topology
from tests.helpers import one_task, wait_until

#: A backoff no test may sit out: a loop that does not wake on stop hangs far past
#: ``JOIN_S`` instead of failing by a hair.
HUGE_S = 3600.0
#: How long a stopped loop may take to return (generous: it returns at once).
JOIN_S = 30.0
ONE = one_task()
UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/%2F"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingBackoff(Backoff):
    """A backoff that records the failure count at each wait and waits (almost) not."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(base=0.001, cap=0.001, clock=clock)
        self.seen: list[int] = []

    def next_delay(self) -> float:
        delay = super().next_delay()
        self.seen.append(self.failures)
        return delay


class ScriptedConsumer:
    """A DispatchConsumer whose ``get`` follows a shared script, one step per call:
    ``"fail"`` raises BrokerUnavailableError (the connection is lost), a callable runs
    and the get returns nothing."""

    def __init__(self, script: list[Any]) -> None:
        self._script = script

    def get(self, timeout: float) -> Delivery | None:
        step = self._script.pop(0)
        if step == "fail":
            raise errors.BrokerUnavailableError("scripted connection loss")
        step()
        return None

    def pump(self, seconds: float) -> None:
        """Nothing is ever delivered, so no handler runs."""

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """Nothing is ever delivered, so nothing is acked."""

    def close(self) -> None:
        """Nothing to release."""


def run_in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    failures: list[BaseException] = []

    def watched() -> None:
        try:
            target()
        except BaseException as exc:  # re-raised or inspected in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=watched, name="loop-under-test")
    thread.start()
    return thread, failures


def worker_with_script(app: FlowForge, script: list[Any], clock: FakeClock) -> Worker:
    backoff = RecordingBackoff(clock)
    worker = Worker(app, lambda: ScriptedConsumer(script), backoff=backoff, worker_id="w")
    script.append(lambda: worker.stop.set("script done"))
    return worker


@pytest.mark.parametrize(
    ("healthy_for", "expected"),
    [(RECONNECT_BACKOFF_RESET_AFTER_S, [1, 2, 3, 1]), (1.0, [1, 2, 3, 4])],
)
def test_the_workers_reconnect_backoff_resets_only_after_a_healthy_period(
    sqlite_app: FlowForge, healthy_for: float, expected: list[int]
) -> None:
    clock = FakeClock()

    def healthy() -> None:
        clock.now += healthy_for

    script: list[Any] = ["fail", "fail", "fail", lambda: None, healthy, "fail"]
    worker = worker_with_script(sqlite_app, script, clock)
    worker.run()
    assert worker.backoff.seen == expected  # type: ignore[attr-defined]


# --- a stop wakes a reconnect wait ------------------------------------------------------


def huge_backoff() -> Backoff:
    return Backoff(base=HUGE_S, cap=HUGE_S, rand=lambda: 1.0)


def test_a_stop_interrupts_the_workers_reconnect_wait(sqlite_app: FlowForge) -> None:
    unreachable = BrokerConfig(url=UNREACHABLE)
    attempts = threading.Event()

    def connect() -> RabbitDispatchConsumer:
        attempts.set()
        return RabbitDispatchConsumer(unreachable, task_types=["work"])

    worker = Worker(sqlite_app, connect, backoff=huge_backoff(), worker_id="w")
    thread, failures = run_in_thread(worker.run)
    assert attempts.wait(JOIN_S)
    worker.stop.set("test")  # during (or just before) an hour's backoff
    thread.join(JOIN_S)
    assert not thread.is_alive(), "the worker sat out its reconnect backoff after a stop"
    assert failures == []
    assert worker.backoff.failures == 1


def test_a_stop_interrupts_the_publishers_reconnect_wait(sqlite_app: FlowForge) -> None:
    sqlite_app.start_workflow_run(ONE)  # something to publish
    unreachable = BrokerConfig(url=UNREACHABLE)
    attempts = threading.Event()

    def connect() -> RabbitDispatchPublisher:
        attempts.set()
        return RabbitDispatchPublisher(unreachable)

    publisher = Publisher(sqlite_app, connect, backoff=huge_backoff())
    thread, failures = run_in_thread(publisher.run)
    assert attempts.wait(JOIN_S)
    publisher.stop.set("test")
    thread.join(JOIN_S)
    assert not thread.is_alive(), "the publisher sat out its reconnect backoff after a stop"
    assert failures == []
    assert sqlite_app.pending_dispatch_count() == 1


# --- a queue-type mismatch is never retried ---------------------------------------------


@pytest.fixture
def classic_queue() -> Iterator[BrokerConfig]:
    """A topology whose dispatch queue already exists as a classic queue."""
    with topology.own_topology() as config:
        connection = pika.BlockingConnection(pika.URLParameters(config.url))
        try:
            # classic, as a FlowForge before quorum queues declared it
            connection.channel().queue_declare(config.queue_for("work"), durable=True)
        finally:
            connection.close()
        yield config


def test_the_worker_stops_on_a_queue_type_mismatch_after_one_attempt(
    sqlite_app: FlowForge, classic_queue: BrokerConfig
) -> None:
    connects: list[int] = []

    def connect() -> RabbitDispatchConsumer:
        connects.append(1)
        return RabbitDispatchConsumer(classic_queue, task_types=["work"])

    worker = Worker(sqlite_app, connect, backoff=huge_backoff(), worker_id="w")
    thread, failures = run_in_thread(worker.run)
    thread.join(JOIN_S)
    worker.stop.set("test")  # a loop that retried must not outlive the test
    assert not thread.is_alive(), "the worker retried a queue-type mismatch"
    assert [type(f) for f in failures] == [errors.QueueTypeMismatchError]
    assert "Delete the queue" in str(failures[0])
    assert len(connects) == 1


def test_the_publisher_stops_on_a_queue_type_mismatch_and_leaves_its_rows_pending(
    sqlite_app: FlowForge, classic_queue: BrokerConfig
) -> None:
    sqlite_app.start_workflow_run(ONE)
    connects: list[int] = []

    def connect() -> RabbitDispatchPublisher:
        connects.append(1)
        return RabbitDispatchPublisher(classic_queue)

    publisher = Publisher(sqlite_app, connect, backoff=huge_backoff())
    thread, failures = run_in_thread(publisher.run)
    thread.join(JOIN_S)
    publisher.stop.set("test")  # a loop that retried must not outlive the test
    assert not thread.is_alive(), "the publisher retried a queue-type mismatch"
    assert [type(f) for f in failures] == [errors.QueueTypeMismatchError]
    assert "Delete the queue" in str(failures[0])
    assert len(connects) == 1
    assert sqlite_app.pending_dispatch_count() == 1


# --- the publisher's loop ---------------------------------------------------------------


class FlakyPublisher:
    """The in-process channel's publisher, refusing its first ``failures`` batches as
    an unreachable broker would."""

    def __init__(self, channel: InMemoryDispatchChannel, failures: int) -> None:
        self._publisher = channel.publisher()
        self._failures = failures
        #: The size of each batch that went through.
        self.batches: list[int] = []

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        if self._failures > 0:
            self._failures -= 1
            raise errors.BrokerUnavailableError("scripted outage")
        self._publisher.publish(messages)
        self.batches.append(len(messages))

    def close(self) -> None:
        """Nothing to release."""


def test_the_publisher_rides_out_an_outage_and_drains_a_backlog_without_waiting_between_batches(
    sqlite_app: FlowForge,
) -> None:
    for _ in range(3):
        sqlite_app.start_workflow_run(ONE)
    channel = InMemoryDispatchChannel()
    flaky = FlakyPublisher(channel, failures=2)
    # An hour between sweeps: only a full batch may be followed at once by the next.
    publisher = Publisher(
        sqlite_app,
        lambda: flaky,
        batch_size=1,
        interval=HUGE_S,
        backoff=Backoff(base=0.001, cap=0.001),
    )
    thread, failures = run_in_thread(publisher.run)
    try:
        wait_until(lambda: channel.ready_count >= 3, JOIN_S, "the backlog drained")
        assert channel.ready_count == 3, "the backlog did not drain batch after batch"
    finally:
        publisher.stop.set("test")
        thread.join(JOIN_S)
    assert not thread.is_alive()
    assert failures == []
    assert sqlite_app.pending_dispatch_count() == 0
    assert publisher.backoff.failures == 0  # a sweep that went through reset it
    assert flaky.batches == [1, 1, 1]  # batch_size rows per sweep, no more


def test_a_publisher_built_without_a_backoff_rides_out_an_outage_with_the_default_one(
    sqlite_app: FlowForge,
) -> None:
    sqlite_app.start_workflow_run(ONE)
    channel = InMemoryDispatchChannel()
    flaky = FlakyPublisher(channel, failures=1)
    publisher = Publisher(sqlite_app, lambda: flaky)
    thread, failures = run_in_thread(publisher.run)
    try:
        wait_until(lambda: channel.ready_count >= 1, JOIN_S, "the dispatch published")
        assert channel.ready_count == 1
    finally:
        publisher.stop.set("test")
        thread.join(JOIN_S)
    assert failures == []


def test_a_publisher_refuses_a_batch_size_below_one_naming_it(sqlite_app: FlowForge) -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        Publisher(sqlite_app, InMemoryDispatchChannel().publisher, batch_size=0)
