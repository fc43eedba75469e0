"""A returning broker is noticed within about a second: real PostgreSQL, real RabbitMQ,
a real ``rabbitmqctl stop_app`` / ``start_app`` (serial: it stops the shared broker)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from flowforge.app.service import FlowForge
from flowforge.config import BrokerConfig
from flowforge.processes import loop
from flowforge.processes.publisher import Publisher
from flowforge.processes.rabbitmq import RabbitDispatchConsumer, RabbitDispatchPublisher
from flowforge.processes.transport import DispatchPublisher
from tests import topology

pytestmark = [pytest.mark.postgres, pytest.mark.rabbitmq, pytest.mark.serial]

WIDE = {"name": "wide", "tasks": [{"key": f"t{i}", "type": "work"} for i in range(10)]}
#: A bound that only ends a broken test; polling stops as soon as the condition holds.
DEADLINE_S = 60.0
#: Failed reconnects to sit through before the broker returns. With the old policy
#: (0.5 s doubling to a 30 s cap) the fifth failure already waits up to 8 s, the sixth
#: up to 16 s; with the new one no wait exceeds RECONNECT_BACKOFF_CAP_S (1 s).
OUTAGE_FAILURES = 6
#: From "the broker has started" to "every row committed during the outage is
#: confirmed": at most one backoff wait (1 s), a reconnect and one batch publish. 5 s
#: leaves room for a loaded two-core machine; the old policy missed it with most draws.
RESUMED_WITHIN_S = 5.0


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=180)


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class RecordingStop(loop.Stop):
    """A stop request that remembers every wait the publisher asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return super().wait(seconds)


@pytest.fixture
def broker() -> Iterator[BrokerConfig]:
    with topology.own_topology() as config:
        yield config


def drain_queue(config: BrokerConfig) -> list[bytes]:
    consumer = RabbitDispatchConsumer(config)
    bodies = []
    try:
        while (delivery := consumer.get(1.0)) is not None:
            bodies.append(delivery.body)
            delivery.ack()
    finally:
        consumer.close()
    return bodies


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
        wait_until(lambda: pg_app.pending_dispatch_count() == 0, "the first run's dispatches")
        try:
            rabbitmqctl("stop_app")
            before_outage = connects
            pg_app.start_workflow_run(WIDE)  # committed while the broker is away
            wait_until(
                lambda: connects - before_outage >= OUTAGE_FAILURES,
                f"{OUTAGE_FAILURES} failed reconnects",
            )
        finally:
            rabbitmqctl("start_app")
            rabbitmqctl("await_startup")
        back = time.monotonic()
        wait_until(lambda: pg_app.pending_dispatch_count() == 0, "the outage's dispatches")
        resumed_after = time.monotonic() - back
    finally:
        stop.set("test over")
        thread.join(DEADLINE_S)

    assert not thread.is_alive()
    assert resumed_after < RESUMED_WITHIN_S, f"dispatch resumed {resumed_after:.1f} s late"
    assert max(stop.waits) <= loop.RECONNECT_BACKOFF_CAP_S
    assert len(set(drain_queue(broker))) == 2 * len(WIDE["tasks"])
