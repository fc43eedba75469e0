"""A RabbitMQ topology of a test's own: unique names, its environment, its clean-up."""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pika

from flowforge.config import BrokerConfig
from tests import servers

log = logging.getLogger(__name__)


def unique_broker_config(prefix: str = "ff-test", url: str = servers.RABBITMQ_URL) -> BrokerConfig:
    """Exchanges and queues no other test uses (on the shared broker, or at ``url``)."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    return BrokerConfig(
        url=url,
        exchange=name,
        queue=f"{name}.tasks",
        routing_key=f"{name}.tasks",
        dead_letter_exchange=f"{name}.dlx",
        dead_letter_queue=f"{name}.tasks.dead",
    )


def broker_environment(config: BrokerConfig) -> dict[str, str]:
    """The FLOWFORGE_* variables that make a process use ``config``."""
    return {
        variable: str(getattr(config, field))
        for field, variable in BrokerConfig.ENVIRONMENT.items()
    }


def delete_topology(config: BrokerConfig, task_types: Iterable[str] = ()) -> None:
    """Delete the exchanges and queues of ``config``: the dead letters', the single queue
    of before routing, each of ``task_types``' queues and, on the default broker, every
    other task queue found there (``rabbitmqctl``: AMQP cannot list queues)."""
    queues = {config.queue, config.dead_letter_queue}
    queues.update(config.queue_for(task_type) for task_type in task_types)
    if config.url == servers.RABBITMQ_URL:
        queues.update(task_queues(config))
    connection = pika.BlockingConnection([pika.URLParameters(url) for url in config.urls])
    try:
        channel = connection.channel()
        for queue in sorted(queues):
            channel.queue_delete(queue)
        for exchange in (config.exchange, config.dead_letter_exchange):
            channel.exchange_delete(exchange)
    finally:
        connection.close()


#: ``rabbitmqctl`` under a loaded machine can fail for a moment (exit 64/69/75: the CLI
#: could not reach the node in time): the listing is retried with these pauses first.
LIST_RETRY_PAUSES_S = (0.5, 1.0, 2.0, 4.0, 8.0)


def task_queues(config: BrokerConfig) -> list[str]:
    """The task queues of ``config`` on the default broker, as ``rabbitmqctl`` lists them.

    Retried with backoff when the CLI fails (a busy machine); if it keeps failing, the
    queues a test named are still deleted by the caller, and the listing (a sweep for
    the ones it did not name) is given up with a logged warning rather than erroring the test
    whose teardown this is."""
    failure = ""
    for pause in (*LIST_RETRY_PAUSES_S, None):
        try:
            listed = subprocess.run(
                ["rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name"],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            failure = f"{exc}: {getattr(exc, 'stderr', '') or ''}".strip()
            if pause is not None:
                time.sleep(pause)
            continue
        prefix = config.queue_for("")
        return [name for name in listed.stdout.split() if name.startswith(prefix)]
    log.warning("rabbitmqctl list_queues kept failing; not swept: %s", failure)
    return []


@contextmanager
def own_topology(prefix: str = "ff-test") -> Iterator[BrokerConfig]:
    """A unique topology for the block, deleted afterwards (needs RabbitMQ)."""
    servers.require_rabbitmq()
    config = unique_broker_config(prefix)
    try:
        yield config
    finally:
        delete_topology(config)
