"""The dispatch topology, declared idempotently by every worker and publisher.

All names come from :class:`~flowforge.config.BrokerConfig`; one queue per task type
(``queue_for``), so a dispatch reaches only workers that have a handler for its type::

    exchange (direct, durable) --<queue>.extract--> <queue>.extract (quorum)
                               --<queue>.load-----> <queue>.load (quorum)    ...
                                                  | rejected, or delivered more than
                                                  | delivery_limit times
                                                  v
    dead_letter_exchange (DLX, direct, durable) --routing_key--> dead_letter_queue (quorum)

Both queues are quorum queues: a quorum queue fsyncs its Raft log before it confirms, so
a confirmed publish survives an abrupt broker death, where a classic queue may confirm
a message it has not written yet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from pika.adapters.blocking_connection import BlockingChannel
from pika.exchange_type import ExchangeType

from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import translate

logger = logging.getLogger(__name__)

#: The spec's name: what makes the dispatch queue a quorum queue.
DISPATCH_QUEUE_ARGUMENTS: Final[Mapping[str, object]] = MappingProxyType(
    {"x-queue-type": "quorum"}
)

#: By value, not ``ExchangeType.direct``: types-pika declares the members as ``str``.
_DIRECT: Final = ExchangeType("direct")


def dispatch_queue_arguments(config: BrokerConfig) -> dict[str, object]:
    """The dispatch queue's arguments: quorum, dead-lettering and the delivery limit.

    - ``x-dead-letter-strategy: at-least-once`` makes the queue keep a dead-lettered
      message until the dead-letter queue has confirmed it. The default (at-most-once)
      drops it if the dead-letter queue cannot take it at that moment: a poison message
      would vanish without a trace. RabbitMQ honours at-least-once only together with
      ``x-overflow: reject-publish`` (it falls back to at-most-once with the default
      drop-head) and the ``stream_queue`` feature flag (on by default since 3.9).
      With no length limit set, reject-publish never rejects anything.
    - ``x-delivery-limit``: a message returned to the queue more often than this (its
      consumer crashed or lost its connection while holding it) is dead-lettered
      instead of crashing workers forever. ``requeue`` is a ``basic.nack``: up to
      RabbitMQ 4.2 a nack counts toward the limit too (measured on 3.10), from 4.3 it
      does not. So on older brokers a worker that requeues in a tight loop during a
      database outage dead-letters the dispatch after ``delivery_limit`` cycles: it
      must back off before taking the next message.
    """
    return {
        **DISPATCH_QUEUE_ARGUMENTS,
        "x-dead-letter-exchange": config.dead_letter_exchange,
        "x-dead-letter-routing-key": config.routing_key,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": config.delivery_limit,
    }


def declare_dispatch_queue(
    channel: BlockingChannel,
    config: BrokerConfig | None = None,
    task_types: Iterable[str] = (),
) -> None:
    """Declare the dispatch topology (idempotent): both exchanges, the dead-letter queue,
    and the queue of each of ``task_types``, bound to the exchange (``declare_task_queue``).

    Raises ``QueueTypeMismatchError``, with the short migration procedure, if a queue
    already exists with another type than quorum, or with other arguments (RabbitMQ
    reports the first argument that differs, which for a classic queue is usually not
    ``x-queue-type``; the remedy is the same). That is never retried: no amount of
    reconnecting turns a classic queue into a quorum queue. Any other refusal raises
    ``BrokerError`` with RabbitMQ's reason. The channel is closed by the broker after a
    refusal; the caller drops its connection.
    """
    config = config or BrokerConfig()
    declare_exchange(channel, config.exchange, config)
    declare_exchange(channel, config.dead_letter_exchange, config)
    # The dead letters' queue is a quorum queue too: a dead letter is the one copy of a
    # dispatch nobody could run, and an operator needs to see it after a broker crash.
    _declare_queue(channel, config.dead_letter_queue, dict(DISPATCH_QUEUE_ARGUMENTS), config)
    dead = config.dead_letter_queue
    _bind(channel, dead, config.dead_letter_exchange, config.routing_key, config)
    for task_type in task_types:
        declare_task_queue(channel, config, task_type)


def presence_queue(config: BrokerConfig, task_type: str) -> str:
    """The queue a worker of several types consumes to be counted as ``task_type``'s
    consumer: it takes that type's dispatches with ``basic.get``, which the broker does not
    count (see ``consumer.py``). Nothing is ever published to it."""
    return f"{config.queue_for(task_type)}~workers"


def declare_presence_queue(channel: BlockingChannel, config: BrokerConfig, task_type: str) -> str:
    """Declare ``task_type``'s presence queue (idempotent): transient, deleted by the
    broker once its last consumer is gone; its name."""
    queue = presence_queue(config, task_type)
    channel.queue_declare(queue, durable=False, auto_delete=True)
    return queue


def declare_task_queue(channel: BlockingChannel, config: BrokerConfig, task_type: str) -> str:
    """Declare ``task_type``'s dispatch queue and bind it (idempotent); its name.

    The exchanges must exist (``declare_dispatch_queue``). Whoever first needs the queue
    declares it: a worker before it consumes, a publisher before it publishes, so a
    dispatch of a type no worker has started for yet waits in its queue.
    """
    queue = config.queue_for(task_type)
    _declare_queue(channel, queue, dispatch_queue_arguments(config), config)
    _bind(channel, queue, config.exchange, queue, config)
    logger.debug(
        "task queue declared",
        extra={"action": "declare", "queue": queue, "exchange": config.exchange},
    )
    return queue


def declare_exchange(channel: BlockingChannel, exchange: str, config: BrokerConfig) -> None:
    with translate.refusals(config, f"exchange {exchange!r}"):
        channel.exchange_declare(exchange, exchange_type=_DIRECT, durable=True)


def _declare_queue(
    channel: BlockingChannel, queue: str, arguments: Mapping[str, object], config: BrokerConfig
) -> None:
    with translate.refusals(config, f"queue {queue!r}", queue=queue):
        channel.queue_declare(queue, durable=True, arguments=arguments)


def _bind(
    channel: BlockingChannel, queue: str, exchange: str, routing_key: str, config: BrokerConfig
) -> None:
    with translate.refusals(config, f"the binding of queue {queue!r} to exchange {exchange!r}"):
        channel.queue_bind(queue, exchange, routing_key=routing_key)
