"""``flowforge scheduler``, ``publisher`` and ``worker``: the production processes.

Each runs until SIGTERM or SIGINT and then stops cleanly (exit 0): the worker finishes
or abandons its current message as the Worker class decides, the publisher leaves
unpublished rows pending. A server that is unreachable at start is a one-line error
(exit 3); an outage later is ridden out by the loops' reconnect backoff.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable

from flowforge import config
from flowforge.cli import common
from flowforge.cli.parser import UsageError
from flowforge.processes import rabbitmq
from flowforge.processes.loop import Stop
from flowforge.processes.publisher import Publisher
from flowforge.processes.registry import default_registry
from flowforge.processes.runner import Transport
from flowforge.processes.scheduler import Scheduler
from flowforge.processes.worker import Worker, default_worker_id

log = logging.getLogger(__name__)

#: How often the main thread checks on the worker threads while it waits for a stop.
WATCH_INTERVAL_S = 0.5


def scheduler(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        Scheduler(app, interval=args.interval).run()
    return 0


def publisher(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    configured = require_broker(settings, "publisher")
    with common.open_app(settings) as app:
        broker = configured.for_deployment(app.deployment_id)
        check_broker(broker)
        Publisher(
            app,
            lambda: rabbitmq.RabbitDispatchPublisher(broker),
            batch_size=args.batch_size,
            interval=args.interval,
        ).run()
    return 0


def worker(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    configured = require_broker(settings, "worker")
    common.import_task_modules(args.tasks, default_registry)
    with common.open_app(settings) as app:
        broker = configured.for_deployment(app.deployment_id)
        check_broker(broker)
        base_id = args.worker_id or default_worker_id()
        stop = Stop()
        workers = [
            Worker(
                app,
                lambda: rabbitmq.RabbitDispatchConsumer(broker),
                registry=default_registry,
                worker_id=base_id if args.concurrency == 1 else f"{base_id}-{number}",
                stop=stop,
            )
            for number in range(1, args.concurrency + 1)
        ]
        run_threads([(w.worker_id, w.run) for w in workers], stop)
    return 0


def run_threads(targets: list[tuple[str, Callable[[], None]]], stop: Stop) -> None:
    """Run each target in a thread until ``stop``; re-raise the first thread's failure.

    The signal handlers are installed here, once, in the main thread: the Worker class
    installs them from ``run()``, which is a no-op outside the main thread.
    """
    stop.install_signal_handlers()
    failures: list[BaseException] = []

    def watched(name: str, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:
            # One failed thread stops the process: a half-running worker hides the fault.
            log.exception("worker thread failed", extra={"worker_thread": name})
            failures.append(exc)
            stop.set(f"{name} failed")

    threads = [
        threading.Thread(target=watched, args=(name, target), name=name)
        for name, target in targets
    ]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        if stop.wait(WATCH_INTERVAL_S):
            for thread in threads:
                thread.join()
    if failures:
        raise failures[0]


def require_broker(settings: config.Settings, command: str) -> config.BrokerConfig:
    if settings.broker is None:
        raise UsageError(
            f"`flowforge {command}` needs a broker: set FLOWFORGE_BROKER_URL (or pass "
            f"--broker-url), or use `flowforge run`, which runs every process in one "
            f"process with in-process dispatch"
        )
    return settings.broker


def check_broker(broker: config.BrokerConfig) -> None:
    """Fail fast, with one line naming host and port, if the broker is unreachable now."""
    connection = rabbitmq.connect(broker, name="flowforge-startup-check")
    connection.close()


def transport_for(settings: config.Settings, deployment: str) -> Transport:
    """In-process dispatch when embedded; RabbitMQ when a broker is configured, on the
    deployment's own topology unless its names are set explicitly."""
    if settings.broker is None:
        return Transport.in_memory()
    broker = settings.broker.for_deployment(deployment)
    check_broker(broker)
    return Transport(
        lambda: rabbitmq.RabbitDispatchPublisher(broker),
        lambda: rabbitmq.RabbitDispatchConsumer(broker),
    )
