"""The production processes: ``worker``, ``scheduler`` and ``publisher`` (their handlers:
``flowforge/cli/processes.py``)."""

from __future__ import annotations

from dataclasses import replace

from flowforge.cli import flags
from flowforge.cli.grammar.command import Command

WORKER = Command(
    "worker",
    "consume dispatches and run task handlers (needs a broker)",
    "FLOWFORGE_BROKER_URL=amqp://guest:guest@localhost:5672/%2F "
    "flowforge worker --tasks examples.tasks --concurrency 4",
    "flowforge.cli.processes:worker",
    (
        replace(flags.TASKS, required=True),
        flags.TYPES,
        flags.CONCURRENCY,
        flags.BATCH,
        flags.WORKER_ID,
        flags.WORKER_GRACE,
        flags.METRICS_PORT,
    ),
    log_level="INFO",
    description="A worker process: claims dispatched tasks and runs their handlers "
    "(imported with --tasks). It consumes only the queues of the task types it has "
    "handlers for (or of --types), so a dispatch reaches only a worker that can run "
    "it. On SIGTERM/SIGINT it lets the task in hand finish for --grace seconds, then "
    "exits; a second Ctrl-C exits at once.",
)


SCHEDULER = Command(
    "scheduler",
    "advance runs, schedule retries, reap expired leases and fire cron schedules",
    "flowforge scheduler --interval 0.5",
    "flowforge.cli.processes:scheduler",
    (flags.SCHEDULER_INTERVAL, flags.REDISPATCH_AFTER, flags.METRICS_PORT),
    log_level="INFO",
)


PUBLISHER = Command(
    "publisher",
    "publish the outbox's dispatches to the broker (needs a broker)",
    "flowforge publisher --batch-size 500 --interval 0.2",
    "flowforge.cli.processes:publisher",
    (flags.BATCH_SIZE, flags.PUBLISHER_INTERVAL, flags.METRICS_PORT),
    log_level="INFO",
)
