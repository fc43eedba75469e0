"""The composition root: what it wires for each configuration (no broker needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flowforge import bootstrap, errors
from flowforge.bootstrap import Transport
from flowforge.config import BrokerConfig, Settings
from flowforge.processes.registry import TaskRegistry
from flowforge.processes.transport import (
    InMemoryDispatchChannel,
    InMemoryDispatchConsumer,
    InMemoryDispatchPublisher,
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'flowforge.db'}")


@pytest.fixture
def processes(settings: Settings) -> Iterator[bootstrap.Processes]:
    wired = bootstrap.bootstrap(settings, registry=TaskRegistry())
    yield wired
    wired.app.close()


def test_without_a_broker_the_transport_is_the_in_process_channel(settings: Settings) -> None:
    transport = bootstrap.transport_for(settings, "0123456789ab")
    assert not transport.durable
    assert isinstance(transport.connect_publisher(), InMemoryDispatchPublisher)
    assert isinstance(transport.connect_consumer(task_types=["work"]), InMemoryDispatchConsumer)


def test_every_process_receives_the_same_app_registry_and_stop(
    processes: bootstrap.Processes,
) -> None:
    worker = processes.worker("w-1")
    publisher = processes.publisher(batch_size=7)
    scheduler = processes.scheduler(interval=0.5)
    assert worker.app is publisher.app is scheduler.app is processes.app
    assert worker.registry is processes.registry
    assert worker.stop is publisher.stop is scheduler.stop is processes.stop
    assert (worker.worker_id, publisher.batch_size, scheduler.interval) == ("w-1", 7, 0.5)


def test_a_process_wired_without_dispatch_gets_no_transport(settings: Settings) -> None:
    wired = bootstrap.bootstrap(settings, dispatch=False)
    try:
        assert wired.transport is None
        wired.scheduler()  # needs none
        with pytest.raises(RuntimeError, match="without a transport"):
            wired.worker()
    finally:
        wired.app.close()


def test_a_broker_that_is_unreachable_at_start_fails_the_bootstrap_naming_it(
    settings: Settings,
) -> None:
    unreachable = settings.model_copy(
        update={"broker": BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F")}
    )
    with pytest.raises(errors.BrokerUnavailableError, match=r"127\.0\.0\.1:1 "):
        bootstrap.transport_for(unreachable, "0123456789ab")


def test_a_worker_consumes_only_the_types_it_is_given_each_with_a_handler(
    settings: Settings,
) -> None:
    registry = TaskRegistry()
    for task_type in ("extract", "train"):
        registry.task(task_type)(lambda ctx: None)
    channel = InMemoryDispatchChannel()
    wired = bootstrap.bootstrap(
        settings, registry=registry, transport=Transport.in_memory(channel)
    )
    try:
        with pytest.raises(errors.ConfigurationError, match=r"task type\(s\) gpu \(registered"):
            wired.worker("w", task_types=["gpu"])
        consumer = wired.worker("w", task_types=["train"])._connect()
        assert isinstance(consumer, InMemoryDispatchConsumer)
        assert consumer.task_types == ("train",)
        every = wired.worker("w")._connect()
        assert isinstance(every, InMemoryDispatchConsumer)
        assert every.task_types == ("extract", "train")
    finally:
        wired.app.close()
