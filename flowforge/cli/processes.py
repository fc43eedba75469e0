"""``flowforge scheduler``, ``publisher`` and ``worker``: the production processes.

Each runs until SIGTERM or SIGINT and then stops cleanly (exit 0): the worker lets the
task in hand finish for ``--grace`` seconds, then exits without acking it (the broker
redelivers it; the fencing token makes that safe), the publisher leaves unpublished rows
pending. A server that is unreachable at start is a one-line error
(exit 3); an outage later is ridden out by the loops' reconnect backoff.
"""

from __future__ import annotations

import argparse
import logging

from flowforge import bootstrap, config
from flowforge.cli import common, ending
from flowforge.cli.parser import UsageError
from flowforge.processes.registry import default_registry
from flowforge.processes.worker import default_worker_id
from flowforge.redaction import redacted

log = logging.getLogger(__name__)


def scheduler(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    _starting("scheduler", settings)
    with common.open_app(settings) as app:
        common.serve_metrics(args, app, backlog=True)
        # The scheduler publishes nothing: it gets no transport to check, only a way to
        # ask the broker how full a queue is (the redispatch net, docs/delivery.md).
        processes = bootstrap.bootstrap(settings, app=app, dispatch=False)
        processes.scheduler(interval=args.interval, redispatch_after=args.redispatch_after).run()
    return 0


def publisher(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    require_broker(settings, "publisher")
    _starting("publisher", settings)
    with common.open_app(settings) as app:
        common.serve_metrics(args, app)
        processes = bootstrap.bootstrap(settings, app=app)
        processes.publisher(batch_size=args.batch_size, interval=args.interval).run()
    return 0


def worker(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    require_broker(settings, "worker")
    common.import_task_modules(args.tasks, default_registry)
    if not len(default_registry):
        raise UsageError(
            f"the modules given with --tasks ({', '.join(args.tasks)}) register no handler, "
            f"so this worker would consume nothing: decorate each handler with @task(TYPE)"
        )
    _starting("worker", settings)
    with common.open_app(settings) as app:
        common.serve_metrics(args, app)
        processes = bootstrap.bootstrap(settings, app=app, registry=default_registry)
        base_id = args.worker_id or default_worker_id()
        count = args.concurrency
        ids = [base_id] if count == 1 else [f"{base_id}-{n}" for n in range(1, count + 1)]
        abandoned = processes.run_workers(
            ids, batch=args.batch, task_types=args.types or None, grace=args.grace
        )
    if abandoned:
        ending.abandoned_threads()
        # Exiting drops the broker connection: the unacked dispatches go back on their
        # queues, and the leases of the tasks in hand expire and are reaped.
        log.warning(
            "stop grace ran out; exiting with tasks still running, unacked",
            extra={"grace_s": args.grace, "abandoned_workers": abandoned},
        )
    return 0


def _starting(process: str, settings: config.Settings) -> None:
    """Where the process connects, its passwords masked: the first line an operator
    reads when a process cannot reach its servers."""
    broker = settings.broker
    log.info(
        f"{process} starting",
        extra={
            "database_url": redacted(settings.database_url),
            "broker_url": redacted(broker.url) if broker is not None else None,
        },
    )


def require_broker(settings: config.Settings, command: str) -> config.BrokerConfig:
    if settings.broker is None:
        raise UsageError(
            f"`flowforge {command}` needs a broker: set FLOWFORGE_BROKER_URL (or pass "
            f"--broker-url), or use `flowforge run`, which runs every process in one "
            f"process with in-process dispatch"
        )
    return settings.broker
