"""The composition root: what it wires for each configuration (no broker needed)."""

from __future__ import annotations

import ast
import textwrap
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


def test_a_scheduler_wired_without_dispatch_asks_the_configured_broker_for_its_net(
    settings: Settings,
) -> None:
    wired = bootstrap.bootstrap(settings, dispatch=False)
    try:
        assert wired.scheduler().probe is None  # no broker: no net
    finally:
        wired.app.close()
    unreachable = settings.model_copy(
        update={"broker": BrokerConfig(url="amqp://guest:guest@127.0.0.1:1/%2F")}
    )
    wired = bootstrap.bootstrap(unreachable, dispatch=False)
    try:
        scheduler = wired.scheduler(redispatch_after=7.0)
        assert scheduler.redispatch_after == 7.0
        assert scheduler.probe is not None
        assert scheduler.probe("work") is None  # the broker did not answer
    finally:
        wired.app.close()


def test_a_probe_that_got_no_answer_waits_before_asking_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flowforge.processes import rabbitmq

    asked: list[str] = []

    def unanswered(broker: BrokerConfig, task_type: str) -> None:
        asked.append(task_type)
        raise errors.BrokerUnavailableError("no answer")

    monkeypatch.setattr(rabbitmq, "queue_state", unanswered)
    now = [100.0]
    probe = bootstrap.queue_probe(BrokerConfig(url="amqp://x"), clock=lambda: now[0])
    assert probe("a") is None
    now[0] += bootstrap.PROBE_COOLDOWN_S - 1
    assert probe("a") is None
    assert asked == ["a"]  # the second pass did not wait on the broker
    now[0] += 1
    assert probe("a") is None
    assert asked == ["a", "a"]


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


# --- one composition root --------------------------------------------------------------

#: What only the composition root constructs or starts: the application service, the
#: transports and their adapters, the loops and their supervisor, the observers.
WIRING = frozenset(
    {
        "FlowForge",
        "Transport",
        "Transport.in_memory",
        "Transport.rabbitmq",
        "InMemoryDispatchChannel",
        "RabbitDispatchPublisher",
        "RabbitDispatchConsumer",
        "Processes",
        "ProcessGroup",
        "Scheduler",
        "Publisher",
        "Worker",
        "Supervisor",
        "metrics.serve",
        "metrics.collect_database",
        "tracing.configure",
    }
)

ROOT = Path(__file__).resolve().parents[2]


def wiring_calls(source: str) -> list[str]:
    """Each call in ``source`` that constructs or starts what :data:`WIRING` names
    (``Transport.in_memory(...)`` as ``bootstrap.Transport.in_memory(...)``), by line."""
    found = []
    calls = (node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call))
    for node in sorted(calls, key=lambda call: (call.lineno, call.col_offset)):
        parts: list[str] = []
        func = node.func
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if isinstance(func, ast.Name):
            parts.insert(0, func.id)
        if {".".join(parts[-2:]), parts[-1] if parts else ""} & WIRING:
            found.append(f"{node.lineno}: {'.'.join(parts)}")
    return found


@pytest.mark.parametrize("package", ["cli", "ui"])
def test_the_cli_and_the_ui_ask_the_composition_root_and_construct_nothing(package: str) -> None:
    modules = sorted((ROOT / "flowforge" / package).rglob("*.py"))
    assert len(modules) > 5
    found = {
        str(path.relative_to(ROOT)): calls
        for path in modules
        if (calls := wiring_calls(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "ask flowforge/bootstrap.py for them (docs/architecture.md)"


def test_the_scan_finds_a_construction_and_passes_a_request() -> None:
    source = textwrap.dedent("""
        app = FlowForge(settings.database_url)
        group = bootstrap.ProcessGroup(app, bootstrap.Transport.in_memory())
        metrics.serve(9100)
        opened = bootstrap.open_app(settings)
        processes = bootstrap.bootstrap(settings, app=opened).worker("w")
    """)
    assert wiring_calls(source) == [
        "2: FlowForge",
        "3: bootstrap.ProcessGroup",
        "3: bootstrap.Transport.in_memory",
        "4: metrics.serve",
    ]
