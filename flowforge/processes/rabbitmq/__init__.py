"""RabbitMQ: the one package that imports pika.

It owns connection and channel life, the dispatch topology, publisher confirms and the
translation of every pika error into ``flowforge.errors`` (chained, never a bare pika
traceback). The publisher and worker loops see only ``flowforge.processes.transport``.

- :mod:`.topology`: ``declare_dispatch_queue``, ``DISPATCH_QUEUE_ARGUMENTS``, the DLX,
  one queue per task type (``declare_task_queue``);
- :mod:`.connection`: opening (bounded timeouts), the I/O loop, closing;
- :mod:`.confirms`: the one shim that pipelines publisher confirms;
- :mod:`.publisher`: ``RabbitDispatchPublisher`` (bounded reconnect, confirms, mandatory);
- :mod:`.consumer` and :mod:`.delivery`: ``RabbitDispatchConsumer`` (manual acks, a
  prefetch: 1 unless the worker batches) and its deliveries, which settle through the
  consumer's ``settle`` port;
- :mod:`.queues`: a task queue's state for ``why``, and the upgrade from the single
  queue of a FlowForge before routing (``flowforge broker migrate``);
- :mod:`.translate`: pika's errors into FlowForge's, in one place.

The operator's side (the migration from a classic queue, poison messages) is in
docs/delivery.md.
"""

from __future__ import annotations

from flowforge.processes.rabbitmq.connection import (
    BLOCKED_CONNECTION_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    check_not_refused,
    check_reachable,
    connect,
)
from flowforge.processes.rabbitmq.consumer import RabbitDispatchConsumer
from flowforge.processes.rabbitmq.delivery import RabbitDelivery
from flowforge.processes.rabbitmq.dispatch_publisher import (
    MAX_PUBLISH_ATTEMPTS,
    PUBLISH_CONFIRM_TIMEOUT_S,
    RabbitDispatchPublisher,
)
from flowforge.processes.rabbitmq.queues import Migration, migrate_single_queue, queue_state
from flowforge.processes.rabbitmq.topology import (
    DISPATCH_QUEUE_ARGUMENTS,
    declare_dispatch_queue,
    declare_task_queue,
    dispatch_queue_arguments,
)

__all__ = [
    "BLOCKED_CONNECTION_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "DISPATCH_QUEUE_ARGUMENTS",
    "MAX_PUBLISH_ATTEMPTS",
    "PUBLISH_CONFIRM_TIMEOUT_S",
    "Migration",
    "RabbitDelivery",
    "RabbitDispatchConsumer",
    "RabbitDispatchPublisher",
    "check_not_refused",
    "check_reachable",
    "connect",
    "declare_dispatch_queue",
    "declare_task_queue",
    "dispatch_queue_arguments",
    "migrate_single_queue",
    "queue_state",
]
