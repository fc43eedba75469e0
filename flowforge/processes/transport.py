"""The dispatch transport: the interface the publisher and the worker use, and the
in-process implementation behind the embedded mode.

Two implementations satisfy these protocols: ``flowforge.processes.rabbitmq`` (RabbitMQ,
a quorum queue, publisher confirms) and :class:`InMemoryDispatchChannel` (one process,
nothing installed). Both give the same semantics, so the publisher and worker loops are
written once:

- ``publish`` returns only when every message is safely on the queue, else raises;
- a dispatch is routed by its task type: a consumer is opened for the task types it
  has handlers for and receives only their dispatches; a dispatch of a type nobody
  consumes waits for a consumer of its type (RabbitMQ: in the type's own queue);
- a consumer holds at most ``prefetch`` unsettled deliveries (1 unless asked) of each
  of its types: ``get`` returns none of a type while it holds that many of it;
- a delivery is settled exactly once, by ``ack`` (done), ``requeue`` (back on the queue,
  delivered again with ``redelivered=True``) or ``dead_letter`` (moved to the dead-letter
  queue, never delivered again); settling it twice raises ``RuntimeError``, a bug in the
  caller; a consumer's ``ack_all`` acks several of its deliveries at once (RabbitMQ: one
  ``basic.ack`` with ``multiple`` when they are all it holds up to the last of them);
- a delivery left unsettled when its consumer closes (or its connection dies) goes back
  on the queue as redelivered: at-least-once, never lost.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from flowforge import errors, observe
from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage
from flowforge.app.ports import DispatchPublisher as DispatchPublisher  # noqa: PLC0414 - re-export
from flowforge.bounds import batch_size

logger = logging.getLogger(__name__)


@runtime_checkable
class Delivery(Protocol):
    """One message handed to a consumer, to be settled exactly once."""

    @property
    def body(self) -> bytes: ...

    @property
    def redelivered(self) -> bool:
        """True if this message was delivered before (requeued, or its consumer died)."""
        ...

    @property
    def headers(self) -> Mapping[str, object]:
        """The message's headers, as published (``DispatchPublisher.publish``) and as
        the broker may have added to them; empty if it has none."""
        ...

    def ack(self) -> None:
        """Done: the message leaves the queue."""
        ...

    def requeue(self) -> None:
        """Not done: put the message back on the queue to be delivered again."""
        ...

    def dead_letter(self) -> None:
        """Never deliverable: move the message to the dead-letter queue."""
        ...


@runtime_checkable
class DispatchConsumer(Protocol):
    """Takes dispatches off the queue, at most ``prefetch`` unsettled at a time.

    A consumer's methods, and its deliveries' settle methods, are called from one
    thread only; a handler may run in another thread meanwhile (see ``pump``).
    """

    def get(self, timeout: float) -> Delivery | None:
        """The next delivery, or ``None`` if none arrived within ``timeout`` seconds.

        Always ``None`` while this consumer holds ``prefetch`` unsettled deliveries;
        ``get(0)`` returns one that has already arrived, without waiting.
        """
        ...

    def pump(self, seconds: float) -> None:
        """Service the connection (heartbeats) for ``seconds`` while a handler runs.

        Call it in a loop, at least every few seconds, for as long as a handler runs in
        another thread: an unserviced connection is closed by the broker and its
        in-flight message redelivered.
        """
        ...

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """Ack every one of ``deliveries`` (this consumer's), as acking each in turn
        would, in as few broker calls as it can. Each is settled once (``RuntimeError``
        if one already was); a broker error is raised after every delivery was tried."""
        ...

    def close(self) -> None:
        """Stop consuming; every unsettled delivery goes back on the queue."""
        ...


def ack_each(deliveries: Sequence[Delivery]) -> None:
    """``ack_all`` one delivery at a time: every one is tried, the first broker error
    raised at the end (the broker redelivers what was not acked)."""
    lost: errors.BrokerError | None = None
    for delivery in deliveries:
        try:
            delivery.ack()
        except errors.BrokerError as exc:
            lost = lost or exc
    if lost is not None:
        raise lost


class ConsumerFactory(Protocol):
    """Opens a :class:`DispatchConsumer` of ``task_types``' dispatches that may hold
    ``prefetch`` deliveries of each type at once."""

    def __call__(self, *, prefetch: int = 1, task_types: Collection[str]) -> DispatchConsumer: ...


def consumed_types(task_types: Collection[str]) -> tuple[str, ...]:
    """The task types a consumer takes, sorted; at least one (a worker with no handler
    would consume nothing and wait forever)."""
    if isinstance(task_types, str) or not task_types:
        raise errors.ConfigurationError(
            f"a dispatch consumer needs the task types it runs, got {task_types!r}: "
            f"register a handler with @task(...) in a module the worker imports (--tasks)"
        )
    return tuple(sorted(set(task_types)))


#: How a delivery is settled (``Delivery.ack``, ``requeue``, ``dead_letter``).
SettleAction = Literal["ack", "requeue", "dead_letter"]


class SettleOnce:
    """What every transport's delivery shares: its body, and being settled exactly once.

    A subclass says how a settle action reaches its queue (:meth:`_settle`).
    """

    def __init__(
        self, body: bytes, redelivered: bool, headers: Mapping[str, object] | None = None
    ) -> None:
        self._body = body
        self._redelivered = redelivered
        self._headers: Mapping[str, object] = headers or {}
        self._settled = False

    @property
    def body(self) -> bytes:
        return self._body

    @property
    def headers(self) -> Mapping[str, object]:
        return self._headers

    @property
    def redelivered(self) -> bool:
        return self._redelivered

    def ack(self) -> None:
        self._once("ack")

    def take_settlement(self) -> None:
        """Mark this delivery settled by its consumer (``ack_all``), which sends the
        settlement itself; ``RuntimeError`` if it already was."""
        if self._settled:
            raise RuntimeError("This delivery was already settled; settle each delivery once.")
        self._settled = True

    def requeue(self) -> None:
        self._once("requeue")

    def dead_letter(self) -> None:
        self._once("dead_letter")

    def _once(self, action: SettleAction) -> None:
        self.take_settlement()
        self._settle(action)

    def _settle(self, action: SettleAction) -> None:
        raise NotImplementedError


# --- in-process implementation ---------------------------------------------------------


@dataclass
class _Entry:
    task_type: str
    body: bytes
    headers: Mapping[str, str]
    #: Its place in the order of arrival across every type (requeued: a new place).
    order: int
    #: How many times the message went back on the queue (requeued or orphaned).
    returns: int = 0


class InMemoryDispatchChannel:
    """In-process dispatch queues with the broker's semantics, for the embedded mode.

    One queue per task type, as on RabbitMQ; a consumer takes the oldest dispatch among
    its types' queues. Thread-safe: any number of publishers and consumers, in any
    threads. Like the quorum queues, a message returned more than ``delivery_limit``
    times is dead-lettered instead of looping forever (``None``: no limit). A requeued
    message goes to the back of its queue, so one message that keeps failing does not
    starve the others.
    """

    def __init__(self, *, delivery_limit: int | None = 20) -> None:
        if delivery_limit is not None and delivery_limit < 1:
            raise ValueError(f"delivery_limit must be >= 1 or None, got {delivery_limit}")
        self._delivery_limit = delivery_limit
        self._changed = threading.Condition()
        self._ready: dict[str, deque[_Entry]] = {}
        self._unsettled: dict[int, _Entry] = {}
        #: The deliveries each consumer holds (at most its prefetch, of all its types).
        self._held: dict[InMemoryDispatchConsumer, dict[int, str]] = {}
        self._dead: list[bytes] = []
        self._tags = itertools.count(1)
        self._order = itertools.count()

    def publisher(self) -> InMemoryDispatchPublisher:
        return InMemoryDispatchPublisher(self)

    def consumer(
        self, *, prefetch: int = 1, task_types: Collection[str] | None = None
    ) -> InMemoryDispatchConsumer:
        """A consumer of ``task_types``' queues; ``None``: of every type's, as a test or
        a tool that drains the channel wants (a worker always names its types)."""
        return InMemoryDispatchConsumer(self, prefetch=prefetch, task_types=task_types)

    @property
    def dead_letters(self) -> list[bytes]:
        """The bodies on the dead-letter queue, oldest first (a copy)."""
        with self._changed:
            return list(self._dead)

    @property
    def ready_count(self) -> int:
        """Messages waiting to be delivered, of every type."""
        with self._changed:
            return sum(len(queue) for queue in self._ready.values())

    def ready_count_of(self, task_type: str) -> int:
        """Messages of ``task_type`` waiting to be delivered."""
        with self._changed:
            return len(self._ready.get(task_type, ()))

    @property
    def unsettled_count(self) -> int:
        """Messages delivered and not yet settled."""
        with self._changed:
            return len(self._unsettled)

    # The publishers' and consumers' only way in; every state change is under the lock.

    def _append(self, messages: Sequence[tuple[str, bytes, Mapping[str, str]]]) -> None:
        with self._changed:
            for task_type, body, headers in messages:
                entry = _Entry(task_type, body, headers, next(self._order))
                self._queue(task_type).append(entry)
            self._changed.notify_all()

    def _queue(self, task_type: str) -> deque[_Entry]:
        return self._ready.setdefault(task_type, deque())

    def _take(self, consumer: InMemoryDispatchConsumer, timeout: float) -> InMemoryDelivery | None:
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._changed:
            held = self._held.setdefault(consumer, {})
            while (queue := self._next_queue(consumer, held)) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)
            entry = queue.popleft()
            tag = next(self._tags)
            self._unsettled[tag] = entry
            held[tag] = entry.task_type
            return InMemoryDelivery(
                self, consumer, tag, entry.body, entry.returns > 0, entry.headers
            )

    def _next_queue(
        self, consumer: InMemoryDispatchConsumer, held: Mapping[int, str]
    ) -> deque[_Entry] | None:
        """The queue of ``consumer``'s types whose head arrived first, if it may take one
        more (it holds fewer than ``prefetch``, whatever its types, as on RabbitMQ)."""
        if len(held) >= consumer.prefetch:
            return None
        first: deque[_Entry] | None = None
        for task_type in consumer.task_types or list(self._ready):
            queue = self._ready.get(task_type)
            if not queue:
                continue
            if first is None or queue[0].order < first[0].order:
                first = queue
        return first

    def settle(self, consumer: InMemoryDispatchConsumer, tag: int, action: SettleAction) -> None:
        """Settle ``consumer``'s delivery ``tag``: the port its deliveries settle through."""
        with self._changed:
            entry = self._unsettled.pop(tag, None)
            if entry is None:
                raise errors.BrokerUnavailableError(
                    "The delivery's consumer was closed, so the message went back on the "
                    "queue and will be delivered again; it can no longer be settled here."
                )
            self._held[consumer].pop(tag, None)
            if action == "requeue":
                self._return(entry)
            elif action == "dead_letter":
                self._dead.append(entry.body)
            self._changed.notify_all()

    def _orphan(self, consumer: InMemoryDispatchConsumer) -> None:
        """``consumer`` closed: return what it held, as the broker does."""
        with self._changed:
            held = self._held.pop(consumer, {})
            for tag in sorted(held):
                self._return(self._unsettled.pop(tag))
            if held:
                self._changed.notify_all()

    def _return(self, entry: _Entry) -> None:
        entry.returns += 1
        if self._delivery_limit is not None and entry.returns > self._delivery_limit:
            logger.warning(
                "dispatch dead-lettered after too many deliveries",
                extra={"action": "dead_letter", "deliveries": entry.returns},
            )
            self._dead.append(entry.body)
        else:
            entry.order = next(self._order)
            self._queue(entry.task_type).append(entry)


class InMemoryDispatchPublisher:
    """A :class:`DispatchPublisher` onto an :class:`InMemoryDispatchChannel`."""

    def __init__(self, channel: InMemoryDispatchChannel) -> None:
        self._channel = channel

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        # Encoded here, as on the wire, so the worker decodes what RabbitMQ would carry.
        each = headers or {}
        self._channel._append(
            [
                (message.task_type, message.encode(), each.get(message.dispatch_id, {}))
                for message in messages
            ]
        )
        # On the queue once appended: published and confirmed at once.
        observe.announce.dispatches_published(len(messages))
        observe.announce.dispatches_confirmed(len(messages))

    def close(self) -> None:
        """Nothing to release."""


class InMemoryDispatchConsumer:
    """A :class:`DispatchConsumer` on an :class:`InMemoryDispatchChannel`."""

    def __init__(
        self,
        channel: InMemoryDispatchChannel,
        *,
        prefetch: int = 1,
        task_types: Collection[str] | None = None,
    ) -> None:
        self._channel = channel
        self.prefetch = batch_size(prefetch, "prefetch")
        #: The types whose queues it takes from; ``None``: every type's.
        self.task_types = None if task_types is None else consumed_types(task_types)

    def get(self, timeout: float) -> InMemoryDelivery | None:
        return self._channel._take(self, timeout)

    def pump(self, seconds: float) -> None:
        """Nothing to service in-process; waits ``seconds``, as the broker's pump does."""
        time.sleep(max(seconds, 0.0))

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        ack_each(deliveries)

    def close(self) -> None:
        self._channel._orphan(self)


class InMemoryDelivery(SettleOnce):
    """A :class:`Delivery` from an :class:`InMemoryDispatchConsumer`."""

    def __init__(
        self,
        channel: InMemoryDispatchChannel,
        consumer: InMemoryDispatchConsumer,
        tag: int,
        body: bytes,
        redelivered: bool,
        headers: Mapping[str, str],
    ) -> None:
        super().__init__(body, redelivered, headers)
        self._channel = channel
        self._consumer = consumer
        self._tag = tag

    def _settle(self, action: SettleAction) -> None:
        self._channel.settle(self._consumer, self._tag, action)
