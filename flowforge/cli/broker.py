"""``flowforge broker migrate``: the upgrade to one queue per task type.

A FlowForge before routing had one dispatch queue for every task type. After the
upgrade, publishers send each dispatch to its type's queue and workers consume only
those; this command moves what still waits on the old queue to the new ones (confirmed
before it is acked on the old one), then deletes the old queue once it is empty and no
old worker consumes it. The procedure is docs/deployment.md, "Upgrading to per-type
queues".
"""

from __future__ import annotations

import argparse

from flowforge.cli import common
from flowforge.cli.exits import EXIT_FAILED
from flowforge.cli.processes import require_broker


def migrate(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    broker = require_broker(settings, "broker migrate")
    with common.open_app(settings) as app:
        config = broker.for_deployment(app.deployment_id)
    # Imported here: pika is needed only by the commands that talk to the broker.
    from flowforge.processes import rabbitmq  # noqa: PLC0415

    done = rabbitmq.migrate_single_queue(config)
    if not done.existed:
        print(f"no queue {done.queue}: nothing to migrate")
        return 0
    for task_type, count in sorted(done.moved.items()):
        print(f"moved {count} dispatches to {config.queue_for(task_type)}")
    if done.dead_lettered:
        print(f"dead-lettered {done.dead_lettered} messages that are no dispatch")
    if done.deleted:
        print(f"deleted {done.queue}: the migration is complete")
        return 0
    if done.left:
        print(
            f"kept {done.queue}: {done.left} dispatches arrived on it meanwhile (an old "
            f"worker stopped, or an old publisher still runs); run `flowforge broker "
            f"migrate` again once every publisher is upgraded"
        )
    else:
        print(
            f"kept {done.queue}: {done.consumers} consumers (workers of the old "
            f"FlowForge) are still on it, holding its last dispatches; stop them and run "
            f"`flowforge broker migrate` again"
        )
    return EXIT_FAILED
