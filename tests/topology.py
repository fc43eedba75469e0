"""A RabbitMQ topology of a test's own: unique names, its environment, its clean-up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pika

from flowforge.config import BrokerConfig
from tests import servers


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


def delete_topology(config: BrokerConfig) -> None:
    connection = pika.BlockingConnection([pika.URLParameters(url) for url in config.urls])
    try:
        channel = connection.channel()
        for queue in (config.queue, config.dead_letter_queue):
            channel.queue_delete(queue)
        for exchange in (config.exchange, config.dead_letter_exchange):
            channel.exchange_delete(exchange)
    finally:
        connection.close()


@contextmanager
def own_topology(prefix: str = "ff-test") -> Iterator[BrokerConfig]:
    """A unique topology for the block, deleted afterwards (needs RabbitMQ)."""
    servers.require_rabbitmq()
    config = unique_broker_config(prefix)
    try:
        yield config
    finally:
        delete_topology(config)
