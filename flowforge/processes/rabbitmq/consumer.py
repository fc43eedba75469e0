"""The RabbitMQ ``DispatchConsumer``: manual acks, a prefetch (1 unless asked) for the
consumer as a whole, on the dispatch queues of the task types it was opened for.

Quorum queues refuse a channel-wide prefetch (``basic.qos`` global), and a per-consumer
prefetch on K queues lets the broker push K messages. So a consumer of ONE type consumes
its queue (the broker pushes, ``prefetch`` at most), and a consumer of several types
takes each message with ``basic.get``, round-robin over its queues, and only while it
holds fewer than ``prefetch``: it never holds more, whatever K (docs/worker.md,
"Routing"). The broker counts no consumer for ``basic.get``, so such a consumer also
consumes each type's presence queue, where nothing is published: ``why`` adds its
consumers to the type's queue's."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import pika
import pika.spec
from pika.adapters.blocking_connection import BlockingChannel

from flowforge import errors
from flowforge.bounds import batch_size
from flowforge.config import BrokerConfig
from flowforge.processes import transport
from flowforge.processes.rabbitmq import topology, translate
from flowforge.processes.rabbitmq.connection import close_quietly, connect, process_events
from flowforge.processes.rabbitmq.delivery import RabbitDelivery, send_settlement

#: How long an idle consumer of several types waits between two rounds of ``basic.get``
#: over its queues: it starts short and doubles up to the longest while they stay empty
#: (a new dispatch waits at most that long; each round costs K round trips).
IDLE_POLL_FIRST_S = 0.005
IDLE_POLL_LONGEST_S = 0.1

_Message = tuple[BlockingChannel, int, bool, bytes, Mapping[str, Any]]


def _drop(*_message: object) -> None:
    """A message on a presence queue (nobody publishes there): dropped."""


class RabbitDispatchConsumer:
    """A ``DispatchConsumer``: manual acks, on the queue of each of ``task_types``; it
    holds at most ``prefetch`` messages it has not settled yet, in all (see the module).

    The first ``get`` connects, declares the topology (raising ``QueueTypeMismatchError``
    if a queue is classic) and, for one type, starts consuming its queue. Any
    connection error drops the connection and raises ``BrokerUnavailableError``; the
    broker then requeues the unsettled delivery, and the next ``get`` reconnects. A
    delivery from a dropped connection can no longer be settled
    (``BrokerUnavailableError``): the broker redelivers it, and the worker's claim
    makes the redelivery harmless.

    RabbitMQ closes a channel whose delivery stays unacknowledged longer than its
    ``consumer_timeout`` (30 minutes by default): a longer handler needs it raised.
    """

    def __init__(
        self, config: BrokerConfig, *, prefetch: int = 1, task_types: Collection[str]
    ) -> None:
        self._config = config
        self._prefetch = batch_size(prefetch, "prefetch")
        self._task_types = transport.consumed_types(task_types)
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._inbox: deque[_Message] = deque()
        #: The delivery tags handed out on the live channel and not settled yet.
        self._held: set[int] = set()
        self._cancelled = False
        #: Several types: taken with basic.get, starting at this queue's index.
        self._polls = len(self._task_types) > 1
        self._next_queue = 0

    def get(self, timeout: float) -> RabbitDelivery | None:
        with self._unavailable_on_error("consume from"):
            connection, channel = self._open()
            deadline = time.monotonic() + max(timeout, 0.0)
            if self._polls:
                message = self._poll(connection, channel, deadline)
            else:
                message = self._pushed(connection, deadline)
            if message is None:
                return None
            channel, tag, redelivered, body, headers = message
        self._held.add(tag)
        return RabbitDelivery(self, channel, tag, body, redelivered, headers)

    def _pushed(self, connection: pika.BlockingConnection, deadline: float) -> _Message | None:
        """The next message the broker pushed, waiting until ``deadline`` for one."""
        polled = False
        while not self._inbox:
            if self._cancelled:
                raise errors.BrokerUnavailableError(
                    f"RabbitMQ at {translate.endpoint(self._config)} cancelled a "
                    f"consumer of queue(s) {', '.join(self._queues())} (was one "
                    f"deleted?); the next get reconnects and declares them again."
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0 and polled:
                return None
            # Poll at least once, so that get(0) reads what has already arrived.
            process_events(connection, max(remaining, 0.0))
            polled = True
        return self._inbox.popleft()

    def _poll(
        self, connection: pika.BlockingConnection, channel: BlockingChannel, deadline: float
    ) -> _Message | None:
        """The next message of any of the queues, taken with ``basic.get`` while fewer
        than ``prefetch`` are held; rounds ``IDLE_POLL_*`` apart until ``deadline``."""
        pause = IDLE_POLL_FIRST_S
        while True:
            if len(self._held) < self._prefetch and (message := self._get_one(channel)):
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            connection.sleep(min(pause, remaining))  # services heartbeats meanwhile
            pause = min(pause * 2, IDLE_POLL_LONGEST_S)

    def _get_one(self, channel: BlockingChannel) -> _Message | None:
        """One round: ``basic.get`` on each queue in turn, from the one after the last
        that gave a message (so that a busy type does not starve the others)."""
        queues = self._queues()
        for _ in queues:
            index, self._next_queue = self._next_queue, (self._next_queue + 1) % len(queues)
            method, properties, body = channel.basic_get(queues[index], auto_ack=False)
            if method is not None:
                # Always set on a Basic.GetOk, which carries properties and a body.
                assert method.delivery_tag is not None
                assert isinstance(body, bytes)
                headers = (properties.headers if properties else None) or {}
                return channel, method.delivery_tag, bool(method.redelivered), body, headers
        return None

    def pump(self, seconds: float) -> None:
        """Service the connection for ``seconds``; without one, just wait.

        It never connects: a new connection would start consuming and hold a second
        message while the handler still runs. If the connection dies during the pump,
        it raises ``BrokerUnavailableError`` once (the held delivery will be
        redelivered); later pumps wait, and the next ``get`` reconnects.
        """
        connection = self._connection
        if connection is None:
            time.sleep(max(seconds, 0.0))
            return
        with self._unavailable_on_error("service the connection to"):
            connection.sleep(max(seconds, 0.0))

    def settle(
        self, channel: BlockingChannel, delivery_tag: int, action: transport.SettleAction
    ) -> None:
        """Settle a delivery of this consumer's (its :class:`~.delivery.Settler` port).

        A delivery from a connection this consumer has since dropped cannot be settled:
        the broker has already put it back on the queue.
        """
        verb = action.replace("_", "-")
        if channel is not self._channel or channel.is_closed:
            raise errors.BrokerUnavailableError(
                f"Cannot {verb} the delivery: its connection to RabbitMQ at "
                f"{translate.endpoint(self._config)} was lost, so the broker will deliver "
                f"the message again."
            )
        with self._unavailable_on_error(f"{verb} a delivery on"):
            send_settlement(channel, delivery_tag, action)
        self._held.discard(delivery_tag)

    def ack_all(self, deliveries: Sequence[transport.Delivery]) -> None:
        """ONE ``basic.ack`` with ``multiple`` for the lot when they are every delivery
        this consumer holds up to the last of them (a worker's batch, settled after its
        outcomes: tags rise in the order of arrival, and what arrived after the batch
        has higher ones); else each on its own. Each basic.ack is a frame pika flushes on
        its own (docs/performance.md, "Design choices that buy the speed")."""
        own = self._live_deliveries(deliveries)
        tags = {delivery.delivery_tag for delivery in own}
        if len(tags) < 2 or len(tags) != len(deliveries) or self._held_up_to(max(tags)) != tags:
            transport.ack_each(deliveries)
            return
        for delivery in own:
            delivery.take_settlement()
        with self._unavailable_on_error("ack deliveries on"):
            own[0].channel.basic_ack(max(tags), multiple=True)
        self._held -= tags

    def _live_deliveries(self, deliveries: Sequence[transport.Delivery]) -> list[RabbitDelivery]:
        """The deliveries of this consumer's live channel among ``deliveries``."""
        live = self._channel
        if live is None or live.is_closed:
            return []
        return [d for d in deliveries if isinstance(d, RabbitDelivery) and d.channel is live]

    def _held_up_to(self, tag: int) -> set[int]:
        return {held for held in self._held if held <= tag}

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._inbox.clear()
        self._held.clear()
        close_quietly(connection)

    def _open(self) -> tuple[pika.BlockingConnection, BlockingChannel]:
        if self._connection is not None and self._channel is not None:
            return self._connection, self._channel
        self._cancelled = False
        connection = connect(self._config, name="flowforge-worker")
        try:
            channel = connection.channel()
            topology.declare_dispatch_queue(channel, self._config, self._task_types)
            if not self._polls:
                # Per consumer (not global: quorum queues refuse global QoS).
                channel.basic_qos(prefetch_count=self._prefetch)
                channel.add_on_cancel_callback(self._on_cancelled)
                (queue,) = self._queues()
                channel.basic_consume(queue, on_message_callback=self._on_message, auto_ack=False)
            for task_type in self._task_types if self._polls else ():
                # Counted as the type's consumer (why, "no worker is consuming").
                present = topology.declare_presence_queue(channel, self._config, task_type)
                channel.basic_consume(present, on_message_callback=_drop, auto_ack=True)
        except BaseException:
            close_quietly(connection)
            raise
        self._connection, self._channel = connection, channel
        return connection, channel

    def _queues(self) -> list[str]:
        return [self._config.queue_for(task_type) for task_type in self._task_types]

    def _on_message(
        self,
        channel: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        assert method.delivery_tag is not None  # always set on a Basic.Deliver
        headers = properties.headers or {}
        self._inbox.append((channel, method.delivery_tag, method.redelivered, body, headers))

    def _on_cancelled(self, _frame: object) -> None:
        self._cancelled = True

    def _unavailable_on_error(self, action: str) -> AbstractContextManager[None]:
        return translate.unavailable_on_error(self._config, action, drop=self.close)
