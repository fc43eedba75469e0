"""RabbitMQ: the one module that imports pika.

It owns connection and channel life, the dispatch topology, publisher confirms and the
translation of every pika error into ``flowforge.errors`` (chained, never a bare pika
traceback). The publisher and worker loops see only ``flowforge.processes.transport``.

Topology (all names from :class:`~flowforge.config.BrokerConfig`)::

    exchange (direct, durable) --routing_key--> queue (quorum)
                                                  | rejected, or delivered more than
                                                  | delivery_limit times
                                                  v
    dead_letter_exchange (direct, durable) --routing_key--> dead_letter_queue (quorum)

Both queues are quorum queues: a quorum queue fsyncs its Raft log before it confirms, so
a confirmed publish survives an abrupt broker death, where a classic queue may confirm
a message it has not written yet.

Connections are not thread-safe (pika's rule): each publisher and consumer owns one and
must be used from one thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import takewhile
from types import MappingProxyType
from typing import Final, NoReturn

import pika
import pika.channel
import pika.exceptions
import pika.frame
import pika.spec
from pika.adapters.blocking_connection import BlockingChannel
from pika.exchange_type import ExchangeType

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchMessage
from flowforge.config import BrokerConfig
from flowforge.processes import transport

logger = logging.getLogger(__name__)

#: The spec's name: what makes the dispatch queue a quorum queue.
DISPATCH_QUEUE_ARGUMENTS: Final[Mapping[str, object]] = MappingProxyType(
    {"x-queue-type": "quorum"}
)

#: A batch is published at most this many times per ``publish`` call. The second
#: attempt exists for one case: a connection that died while the publisher was idle
#: (a missed heartbeat between sweeps) is only discovered by using it, and failing the
#: sweep for that would turn every idle period into an error. A fresh connection that
#: fails is not retried here; the publisher loop backs off
#: (``flowforge.processes.loop.backoff_delay``).
MAX_PUBLISH_ATTEMPTS: Final = 2
#: TCP connect and AMQP handshake, each.
CONNECT_TIMEOUT_S: Final = 10.0
#: A connection the broker blocks (memory or disk alarm) for longer than this is
#: abandoned with ``BrokerUnavailableError`` instead of hanging the publisher.
BLOCKED_CONNECTION_TIMEOUT_S: Final = 60.0
#: How long a batch may wait for its confirms before it counts as not confirmed.
PUBLISH_CONFIRM_TIMEOUT_S: Final = 30.0

_PERSISTENT: Final = 2  # AMQP delivery_mode: written to disk, survives a broker restart
#: By value, not ``ExchangeType.direct``: types-pika declares the members as ``str``.
_DIRECT: Final = ExchangeType("direct")
_NOT_FOUND: Final = 404
_PRECONDITION_FAILED: Final = 406

#: Errors that mean "the connection or channel is gone", translated to
#: ``BrokerUnavailableError``: every pika error (connection and channel closures, stream
#: loss, heartbeat and blocked timeouts, wrong-state calls on a dead channel) and OSError
#: for a socket error pika did not wrap. Broker refusals are translated before these.
_UNAVAILABLE: Final = (pika.exceptions.AMQPError, OSError)


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


def declare_dispatch_queue(channel: BlockingChannel, config: BrokerConfig | None = None) -> None:
    """Declare the dispatch topology (idempotent): both exchanges, both queues, bindings.

    Raises ``QueueTypeMismatchError``, with the migration procedure, if either queue
    already exists with another type than quorum, or with other arguments (RabbitMQ
    reports the first argument that differs, which for a classic queue is usually not
    ``x-queue-type``; the remedy is the same). That is never retried: no amount of
    reconnecting turns a classic queue into a quorum queue. Any other refusal raises
    ``BrokerError`` with RabbitMQ's reason. The channel is closed by the broker after a
    refusal; the caller drops its connection.
    """
    config = config or BrokerConfig()
    _declare_exchange(channel, config.exchange, config)
    _declare_exchange(channel, config.dead_letter_exchange, config)
    # The dead letters' queue is a quorum queue too: a dead letter is the one copy of a
    # dispatch nobody could run, and an operator needs to see it after a broker crash.
    _declare_queue(channel, config.dead_letter_queue, dict(DISPATCH_QUEUE_ARGUMENTS), config)
    _bind(channel, config.dead_letter_queue, config.dead_letter_exchange, config)
    _declare_queue(channel, config.queue, dispatch_queue_arguments(config), config)
    _bind(channel, config.queue, config.exchange, config)
    logger.debug(
        "dispatch topology declared",
        extra={"action": "declare", "queue": config.queue, "exchange": config.exchange},
    )


def connect(config: BrokerConfig, *, name: str = "flowforge") -> pika.BlockingConnection:
    """Open a blocking connection, or raise ``BrokerUnavailableError`` naming host and port.

    ``name`` shows in the management UI's connection list.
    """
    parameters = _parameters(config)
    parameters.heartbeat = config.heartbeat_seconds
    parameters.blocked_connection_timeout = BLOCKED_CONNECTION_TIMEOUT_S
    parameters.socket_timeout = CONNECT_TIMEOUT_S
    parameters.stack_timeout = CONNECT_TIMEOUT_S
    parameters.connection_attempts = 1  # retrying is the caller's loop's job, with backoff
    parameters.client_properties = {"connection_name": name}
    try:
        connection = pika.BlockingConnection(parameters)
    except (pika.exceptions.AMQPError, OSError) as exc:
        _raise_unavailable(config, "connect to", exc)
    logger.info(
        "broker connected",
        extra={
            "action": "connect",
            "broker": _endpoint(config),
            "vhost": parameters.virtual_host,
            "connection_name": name,
        },
    )
    return connection


class RabbitDispatchPublisher:
    """A ``DispatchPublisher`` with publisher confirms and mandatory routing.

    A batch is published in one go and then waits for all its confirms together,
    instead of one round trip per message (pika's ``BlockingChannel`` in confirm mode
    waits for each confirm before sending the next message; measured here 2,000
    messages took ~1.2 s that way and ~0.06 s batched). A message counts as delivered
    only once the broker has acked it AND not returned it as unroutable (a returned
    message is acked too: the ack means "handled", not "queued").

    The connection is opened lazily by ``publish`` and dropped after any connection
    error, so the next ``publish`` reconnects. With ``declare_queue`` (the default) the
    whole topology is declared on connect, as the worker does; otherwise only the
    dispatch exchange, so that publishing to an unbound exchange is reported as
    unroutable rather than as a missing exchange.
    """

    def __init__(self, config: BrokerConfig, *, declare_queue: bool = True) -> None:
        self._config = config
        self._declare_queue = declare_queue
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._confirms: _Confirms | None = None

    def publish(self, messages: Sequence[DispatchMessage]) -> None:
        if not messages:
            return
        for attempt in range(1, MAX_PUBLISH_ATTEMPTS + 1):
            reused = self._connection is not None
            try:
                self._publish_once(messages)
            except errors.BrokerUnavailableError as exc:
                self.close()
                if not reused or attempt == MAX_PUBLISH_ATTEMPTS:
                    raise
                logger.warning(
                    "publisher connection was lost while idle; reconnecting",
                    extra={"action": "reconnect", "attempt": attempt, "error": str(exc)},
                )
            else:
                return

    def close(self) -> None:
        connection, self._connection, self._channel, self._confirms = (
            self._connection,
            None,
            None,
            None,
        )
        _close_quietly(connection)

    def _publish_once(self, messages: Sequence[DispatchMessage]) -> None:
        connection, channel, confirms = self._open()
        config = self._config
        impl = _impl(channel)
        confirms.begin()
        try:
            for message in messages:
                message_id = str(message.dispatch_id)
                impl.basic_publish(
                    exchange=config.exchange,
                    routing_key=config.routing_key,
                    body=message.encode(),
                    properties=pika.BasicProperties(
                        delivery_mode=_PERSISTENT,
                        content_type="application/json",
                        message_id=message_id,
                    ),
                    mandatory=True,
                )
                confirms.sent(message_id)
            _wait_until(
                connection,
                lambda: not confirms.outstanding,
                channel_closed=lambda: confirms.closed_reason,
                deadline=time.monotonic() + PUBLISH_CONFIRM_TIMEOUT_S,
            )
        except TimeoutError:
            # Outstanding confirms on this channel are now ambiguous: start afresh.
            unconfirmed = len(confirms.outstanding)
            self.close()
            raise errors.PublishNotConfirmedError(
                f"RabbitMQ at {_endpoint(config)} did not confirm {unconfirmed} of "
                f"{len(messages)} dispatches within {PUBLISH_CONFIRM_TIMEOUT_S:.0f} s; "
                f"they stay pending and are published again by the next sweep."
            ) from None
        except _ChannelClosedError as exc:
            self.close()
            _raise_channel_closed(config, exc.reason)
        except _UNAVAILABLE as exc:
            _raise_unavailable(config, "publish to", exc)
        if confirms.returned:
            raise errors.UnroutableDispatchError(
                f"RabbitMQ returned {len(confirms.returned)} of {len(messages)} dispatches "
                f"as unroutable: no queue is bound to exchange {config.exchange!r} with "
                f"routing key {config.routing_key!r} (dispatch ids "
                f"{_sample(confirms.returned)}). Start a worker, which declares and binds "
                f"the queue; the outbox rows stay pending."
            )
        if confirms.nacked:
            raise errors.PublishNotConfirmedError(
                f"RabbitMQ refused (nacked) {len(confirms.nacked)} of {len(messages)} "
                f"dispatches (dispatch ids {_sample(confirms.nacked)}); the queue may be "
                f"unavailable or full. They stay pending and are published again by the "
                f"next sweep."
            )
        logger.debug(
            "dispatches published",
            extra={"action": "publish", "dispatch_count": len(messages)},
        )

    def _open(self) -> tuple[pika.BlockingConnection, BlockingChannel, _Confirms]:
        if self._connection is not None and self._channel is not None and self._confirms:
            return self._connection, self._channel, self._confirms
        connection = connect(self._config, name="flowforge-publisher")
        try:
            channel = connection.channel()
            if self._declare_queue:
                declare_dispatch_queue(channel, self._config)
            else:
                _declare_exchange(channel, self._config.exchange, self._config)
            confirms = _Confirms(connection)
            impl = _impl(channel)
            impl.add_on_return_callback(confirms.on_return)
            impl.add_on_close_callback(confirms.on_channel_closed)
            impl.confirm_delivery(
                ack_nack_callback=confirms.on_confirm, callback=confirms.on_selected
            )
            _wait_until(
                connection,
                lambda: confirms.selected,
                channel_closed=lambda: confirms.closed_reason,
                deadline=time.monotonic() + CONNECT_TIMEOUT_S,
            )
        except BaseException as exc:
            _close_quietly(connection)
            if isinstance(exc, (TimeoutError, _ChannelClosedError, *_UNAVAILABLE)):
                _raise_unavailable(self._config, "open a confirmed channel on", exc)
            raise
        self._connection, self._channel, self._confirms = connection, channel, confirms
        return connection, channel, confirms


class RabbitDispatchConsumer:
    """A ``DispatchConsumer``: manual acks, prefetch 1, on the dispatch queue.

    The first ``get`` connects, declares the topology (raising ``QueueTypeMismatchError``
    if the queue is classic) and starts consuming. Any connection error drops the
    connection and raises ``BrokerUnavailableError``; the broker then requeues the
    unsettled delivery, and the next ``get`` reconnects. A delivery from a dropped
    connection can no longer be settled (``BrokerUnavailableError``): the broker
    redelivers it, and the worker's claim makes the redelivery harmless.

    RabbitMQ closes a channel whose delivery stays unacknowledged longer than its
    ``consumer_timeout`` (30 minutes by default): a longer handler needs it raised.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._inbox: deque[tuple[BlockingChannel, int, bool, bytes]] = deque()
        self._cancelled = False

    def get(self, timeout: float) -> RabbitDelivery | None:
        with self._unavailable_on_error("consume from"):
            connection, _ = self._open()
            deadline = time.monotonic() + max(timeout, 0.0)
            polled = False
            while not self._inbox:
                if self._cancelled:
                    raise errors.BrokerUnavailableError(
                        f"RabbitMQ at {_endpoint(self._config)} cancelled the consumer of "
                        f"queue {self._config.queue!r} (was the queue deleted?); the next "
                        f"get reconnects and declares it again."
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0 and polled:
                    return None
                # Poll at least once, so that get(0) reads what has already arrived.
                _process_events(connection, max(remaining, 0.0))
                polled = True
            channel, tag, redelivered, body = self._inbox.popleft()
        return RabbitDelivery(self, channel, tag, body, redelivered)

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

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._inbox.clear()
        _close_quietly(connection)

    def _open(self) -> tuple[pika.BlockingConnection, BlockingChannel]:
        if self._connection is not None and self._channel is not None:
            return self._connection, self._channel
        self._cancelled = False
        connection = connect(self._config, name="flowforge-worker")
        try:
            channel = connection.channel()
            declare_dispatch_queue(channel, self._config)
            # Per consumer (not global: quorum queues refuse global QoS): the broker sends
            # the next message only after this one is settled.
            channel.basic_qos(prefetch_count=1)
            channel.add_on_cancel_callback(self._on_cancelled)
            channel.basic_consume(
                self._config.queue, on_message_callback=self._on_message, auto_ack=False
            )
        except BaseException:
            _close_quietly(connection)
            raise
        self._connection, self._channel = connection, channel
        return connection, channel

    def _on_message(
        self,
        channel: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        _properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        assert method.delivery_tag is not None  # always set on a Basic.Deliver
        self._inbox.append((channel, method.delivery_tag, method.redelivered, body))

    def _on_cancelled(self, _frame: object) -> None:
        self._cancelled = True

    def _settle(self, channel: BlockingChannel, settle: Callable[[], None], action: str) -> None:
        if channel is not self._channel or channel.is_closed:
            raise errors.BrokerUnavailableError(
                f"Cannot {action} the delivery: its connection to RabbitMQ at "
                f"{_endpoint(self._config)} was lost, so the broker will deliver the "
                f"message again."
            )
        with self._unavailable_on_error(f"{action} a delivery on"):
            settle()

    @contextmanager
    def _unavailable_on_error(self, action: str) -> Iterator[None]:
        """Drop the connection on any error; translate pika's errors."""
        try:
            yield
        except errors.FlowForgeError:
            self.close()
            raise
        except _UNAVAILABLE as exc:
            self.close()
            _raise_unavailable(self._config, action, exc)


class RabbitDelivery(transport.SettleOnce):
    """A ``Delivery`` from :class:`RabbitDispatchConsumer`."""

    def __init__(
        self,
        consumer: RabbitDispatchConsumer,
        channel: BlockingChannel,
        delivery_tag: int,
        body: bytes,
        redelivered: bool,
    ) -> None:
        super().__init__(body, redelivered)
        self._consumer = consumer
        self._channel = channel
        self._tag = delivery_tag

    def _settle(self, outcome: transport.Outcome) -> None:
        tag, channel = self._tag, self._channel
        settle: dict[transport.Outcome, Callable[[], None]] = {
            "ack": lambda: channel.basic_ack(tag),
            "requeue": lambda: channel.basic_nack(tag, requeue=True),
            # Reject without requeue: the queue dead-letters it to the dead-letter exchange.
            "dead_letter": lambda: channel.basic_reject(tag, requeue=False),
        }
        self._consumer._settle(channel, settle[outcome], outcome.replace("_", "-"))


# --- internals --------------------------------------------------------------------------


class _ChannelClosedError(Exception):
    """The publisher's channel was closed (by the broker) while waiting on it."""

    def __init__(self, reason: Exception | None) -> None:
        super().__init__(str(reason))
        self.reason = reason


class _Confirms:
    """Publisher-confirm bookkeeping for one channel, fed by pika's callbacks.

    Delivery tags count publishes on the channel from 1; an ack or nack with
    ``multiple`` settles every outstanding tag up to its own. The callbacks run inside
    pika's I/O loop and must not raise; when the last outstanding confirm arrives they
    schedule a no-op timer, which is what makes ``process_data_events`` return at once
    instead of at its time limit.
    """

    def __init__(self, connection: pika.BlockingConnection) -> None:
        self._connection = connection
        self._next_tag = 1
        self.selected = False
        self.closed_reason: Exception | None = None
        #: tag -> dispatch id, in publish (= tag) order.
        self.outstanding: dict[int, str] = {}
        self.nacked: list[str] = []
        self.returned: list[str] = []

    def begin(self) -> None:
        self.nacked.clear()
        self.returned.clear()

    def sent(self, message_id: str) -> None:
        self.outstanding[self._next_tag] = message_id
        self._next_tag += 1

    def on_selected(self, _frame: pika.frame.Method[pika.spec.Confirm.SelectOk]) -> None:
        self.selected = True
        self._wake()

    def on_confirm(
        self, frame: pika.frame.Method[pika.spec.Basic.Ack | pika.spec.Basic.Nack]
    ) -> None:
        method = frame.method
        tag = method.delivery_tag
        if method.multiple:
            tags = list(takewhile(lambda t: t <= tag, self.outstanding))
        else:
            tags = [tag] if tag in self.outstanding else []
        for settled in tags:
            message_id = self.outstanding.pop(settled)
            if isinstance(method, pika.spec.Basic.Nack):
                self.nacked.append(message_id)
        if not self.outstanding:
            self._wake()

    def on_return(
        self,
        _channel: pika.channel.Channel,
        _method: pika.spec.Basic.Return,
        properties: pika.spec.BasicProperties,
        _body: bytes,
    ) -> None:
        # RabbitMQ sends basic.return before the basic.ack of the same message, so every
        # return of a batch is in by the time its last confirm is.
        self.returned.append(properties.message_id or "(no message id)")

    def on_channel_closed(self, _channel: pika.channel.Channel, reason: Exception) -> None:
        self.closed_reason = reason
        self._wake()

    def _wake(self) -> None:
        self._connection.call_later(0, _do_nothing)


def _do_nothing() -> None:
    """A timer callback whose only effect is to end ``process_data_events``' wait."""


def _wait_until(
    connection: pika.BlockingConnection,
    done: Callable[[], bool],
    *,
    channel_closed: Callable[[], Exception | None],
    deadline: float,
) -> None:
    """Run pika's I/O loop until ``done()``; ``TimeoutError`` at ``deadline``."""
    while not done():
        if (reason := channel_closed()) is not None:
            raise _ChannelClosedError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        _process_events(connection, remaining)


def _process_events(connection: pika.BlockingConnection, seconds: float) -> None:
    # types-pika declares time_limit as int; pika takes (and documents) a float.
    connection.process_data_events(time_limit=seconds)  # type: ignore[arg-type]


def _impl(channel: BlockingChannel) -> pika.channel.Channel:
    """The asynchronous channel under a ``BlockingChannel``.

    ``BlockingChannel`` waits for each publisher confirm before returning from
    ``basic_publish``; pipelining a batch's confirms needs the underlying channel, which
    pika keeps in ``_impl`` (stable since pika 0.10; pinned ``pika<2``). Used for
    publishing and confirms only; everything else goes through the blocking API.
    """
    return channel._impl  # type: ignore[attr-defined,no-any-return]


def _declare_exchange(channel: BlockingChannel, exchange: str, config: BrokerConfig) -> None:
    with _refusals(config, f"exchange {exchange!r}"):
        channel.exchange_declare(exchange, exchange_type=_DIRECT, durable=True)


def _declare_queue(
    channel: BlockingChannel, queue: str, arguments: Mapping[str, object], config: BrokerConfig
) -> None:
    with _refusals(config, f"queue {queue!r}", queue=queue):
        channel.queue_declare(queue, durable=True, arguments=arguments)


def _bind(channel: BlockingChannel, queue: str, exchange: str, config: BrokerConfig) -> None:
    with _refusals(config, f"the binding of queue {queue!r} to exchange {exchange!r}"):
        channel.queue_bind(queue, exchange, routing_key=config.routing_key)


@contextmanager
def _refusals(config: BrokerConfig, what: str, *, queue: str | None = None) -> Iterator[None]:
    """Translate the broker refusing a declaration; connection loss passes through."""
    try:
        yield
    except pika.exceptions.ChannelClosedByBroker as exc:
        # Any PRECONDITION_FAILED on a queue, not only one naming x-queue-type: RabbitMQ
        # compares the arguments in a fixed order and reports the first that differs,
        # and x-queue-type comes late. A classic queue declared without arguments is
        # reported as "inequivalent arg 'x-dead-letter-exchange'". The remedy is the
        # same whatever the differing argument, and retrying never helps.
        if queue is not None and exc.reply_code == _PRECONDITION_FAILED:
            logger.error(
                "dispatch queue exists with another type or arguments",
                extra={"action": "declare", "queue": queue, "reply": exc.reply_text},
            )
            raise errors.QueueTypeMismatchError(
                _migration_procedure(config, queue, exc.reply_text)
            ) from exc
        raise errors.BrokerError(
            f"RabbitMQ at {_endpoint(config)} refused to declare {what}: {exc.reply_code} "
            f"{exc.reply_text}. If it exists with other settings than FlowForge declares "
            f"(another type, arguments or durability), delete it with rabbitmqctl and let "
            f"the worker declare it again."
        ) from exc


def _migration_procedure(config: BrokerConfig, queue: str, reply_text: str) -> str:
    vhost = _parameters(config).virtual_host
    vhost_option = "" if vhost == "/" else f" -p {vhost}"
    if queue == config.dead_letter_queue:
        step_2 = (
            "  2. Inspect or move its dead letters first: they are the only copy of "
            "dispatches nobody could run, and deleting the queue deletes them.\n"
        )
    else:
        step_2 = (
            "  2. Wait for the queue to drain, or accept the loss of unacked dispatches: the "
            "outbox still holds every row that was not confirmed and republishes it; rows "
            "already confirmed but unacked are the only ones at risk, and their tasks are "
            "recovered by the lease reaper once their leases expire.\n"
        )
    if "'x-queue-type'" in reply_text:
        found = "is not a quorum queue"
    else:
        found = (
            "was declared with other arguments than this FlowForge declares: it is a "
            "classic queue, or a quorum queue from an older version"
        )
    return (
        f"The queue {queue!r} already exists and {found} (RabbitMQ: {reply_text}). A "
        f"queue's type and arguments cannot be changed in place. To migrate it:\n"
        f"  1. Stop the worker and the publisher. The scheduler may keep running: it only "
        f"writes outbox rows, which are the durable record.\n"
        f"{step_2}"
        f"  3. Delete the queue: rabbitmqctl delete_queue{vhost_option} {queue} (or use "
        f"the management UI).\n"
        f"  4. Start the worker. It redeclares the queue as a quorum queue and binds it.\n"
        f"  5. Start the publisher. Any row that was pending is delivered normally."
    )


def _raise_channel_closed(config: BrokerConfig, reason: Exception | None) -> NoReturn:
    if (
        isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        and reason.reply_code == _NOT_FOUND
    ):
        raise errors.UnroutableDispatchError(
            f"RabbitMQ at {_endpoint(config)} has no exchange {config.exchange!r} "
            f"({reason.reply_text}). Start a worker, which declares the topology; the "
            f"outbox rows stay pending."
        ) from reason
    _raise_unavailable(config, "publish to", reason or ConnectionError("channel closed"))


def _raise_unavailable(config: BrokerConfig, action: str, exc: BaseException) -> NoReturn:
    endpoint = _endpoint(config)
    logger.warning(
        "broker unavailable",
        extra={"action": action, "broker": endpoint, "error": type(exc).__name__},
    )
    hint = _unavailable_hint(config, exc)
    raise errors.BrokerUnavailableError(
        f"Cannot {action} RabbitMQ at {endpoint} ({exc!r}). {hint}."
    ) from exc


#: What RabbitMQ says when the URL's virtual host is missing, or the user may not use it.
_MISSING_VHOST = re.compile(r"vhost (?P<vhost>\S+) not found")
_VHOST_REFUSED = re.compile(
    r"access to vhost '(?P<vhost>[^']*)' refused for user '(?P<user>[^']*)'"
)


def _unavailable_hint(config: BrokerConfig, exc: BaseException) -> str:
    """What to do, naming what is missing and the command that fixes it."""
    text = str(exc)
    user = getattr(_parameters(config).credentials, "username", "USER")
    if match := _MISSING_VHOST.search(text):
        vhost = match["vhost"]
        return (
            f"RabbitMQ is up but has no virtual host {vhost!r}: create it and let "
            f"{user!r} use it with `rabbitmqctl add_vhost {vhost}` and `rabbitmqctl "
            f"set_permissions -p {vhost} {user} '.*' '.*' '.*'`, or fix the vhost in "
            f"{config.url_setting}"
        )
    if match := _VHOST_REFUSED.search(text):
        vhost = match["vhost"]
        return (
            f"RabbitMQ refused {user!r} access to virtual host {vhost!r}: grant it with "
            f"`rabbitmqctl set_permissions -p {vhost} {user} '.*' '.*' '.*'`"
        )
    if isinstance(exc, pika.exceptions.ProbableAuthenticationError):
        return f"Check the user name and password in {config.url_setting}"
    return f"Check {config.url_setting} and that RabbitMQ is running and reachable"


def _parameters(config: BrokerConfig) -> pika.URLParameters:
    try:
        return pika.URLParameters(config.url)
    except ValueError as exc:
        raise errors.ConfigurationError(
            f"{config.url_setting} is not a URL pika accepts ({exc}); check its query options."
        ) from exc


def _endpoint(config: BrokerConfig) -> str:
    """``host:port`` of the broker, never the credentials."""
    parameters = _parameters(config)
    return f"{parameters.host}:{parameters.port}"


def _sample(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return f"{shown}, ... ({len(ids) - limit} more)" if len(ids) > limit else shown


def _close_quietly(connection: pika.BlockingConnection | None) -> None:
    """Close a connection that may already be dead; a failure to close is not news."""
    if connection is None or connection.is_closed:
        return
    try:
        connection.close()
    except _UNAVAILABLE as exc:
        logger.debug(
            "broker connection did not close cleanly",
            extra={"action": "close", "error": type(exc).__name__},
        )
