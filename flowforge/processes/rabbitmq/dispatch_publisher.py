"""The RabbitMQ ``DispatchPublisher``: batches with publisher confirms and mandatory routing."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final

import pika
from pika.adapters.blocking_connection import BlockingChannel

from flowforge import errors, observe
from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage
from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import topology, translate
from flowforge.processes.rabbitmq.confirms import Confirms, async_channel
from flowforge.processes.rabbitmq.connection import (
    CONNECT_TIMEOUT_S,
    ChannelClosedError,
    close_quietly,
    connect,
    wait_until,
)

logger = logging.getLogger(__name__)

#: A batch is published at most this many times per ``publish`` call. The second
#: attempt exists for one case: a connection that died while the publisher was idle
#: (a missed heartbeat between sweeps) is only discovered by using it, and failing the
#: sweep for that would turn every idle period into an error. A fresh connection that
#: fails is not retried here; the publisher loop backs off
#: (``flowforge.backoff.backoff_delay``).
MAX_PUBLISH_ATTEMPTS: Final = 2
#: How long a batch may wait for its confirms before it counts as not confirmed.
PUBLISH_CONFIRM_TIMEOUT_S: Final = 30.0

_PERSISTENT: Final = 2  # AMQP delivery_mode: written to disk, survives a broker restart


class RabbitDispatchPublisher:
    """A ``DispatchPublisher`` with publisher confirms and mandatory routing.

    A batch is published in one go and then waits for all its confirms together
    (:mod:`~flowforge.processes.rabbitmq.confirms`). A message counts as delivered only
    once the broker has acked it AND not returned it as unroutable (a returned message
    is acked too: the ack means "handled", not "queued").

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
        self._confirms: Confirms | None = None
        #: The task types whose queues this connection has declared (see ``_declare``).
        self._declared: set[str] = set()

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        if not messages:
            return
        for attempt in range(1, MAX_PUBLISH_ATTEMPTS + 1):
            reused = self._connection is not None
            try:
                self._publish_once(messages, headers or {})
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
        self._declared = set()
        close_quietly(connection)

    def _publish_once(self, messages: Sequence[DispatchMessage], headers: DispatchHeaders) -> None:
        connection, channel, confirms = self._open()
        config = self._config
        self._declare(channel, {message.task_type for message in messages})
        confirms.begin()
        try:
            self._send(channel, confirms, messages, headers)
            wait_until(
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
                f"RabbitMQ at {translate.endpoint(config)} did not confirm {unconfirmed} "
                f"of {len(messages)} dispatches within {PUBLISH_CONFIRM_TIMEOUT_S:.0f} s; "
                f"they stay pending and are published again by the next sweep."
            ) from None
        except ChannelClosedError as exc:
            self.close()
            translate.raise_channel_closed(config, exc.reason)
        except translate.UNAVAILABLE as exc:
            translate.raise_unavailable(config, "publish to", exc)
        self._check_settled(confirms, len(messages))
        observe.announce.dispatches_confirmed(len(messages))
        logger.debug(
            "dispatches published",
            extra={"action": "publish", "dispatch_count": len(messages)},
        )

    def _declare(self, channel: BlockingChannel, task_types: set[str]) -> None:
        """Declare the queue of each new type before its first dispatch, once per
        connection: a dispatch of a type no worker has started for yet then waits in
        its own queue instead of being returned as unroutable. Mandatory routing still
        guards the rest: a queue deleted after it was declared here returns the
        dispatch, which stays pending; the next connection declares the queue again."""
        if not self._declare_queue:
            return
        for task_type in sorted(task_types - self._declared):
            with translate.unavailable_on_error(
                self._config, "declare a task queue on", drop=self.close
            ):
                topology.declare_task_queue(channel, self._config, task_type)
            self._declared.add(task_type)

    def _send(
        self,
        channel: BlockingChannel,
        confirms: Confirms,
        messages: Sequence[DispatchMessage],
        headers: DispatchHeaders,
    ) -> None:
        impl = async_channel(channel)
        for message in messages:
            message_id = str(message.dispatch_id)
            impl.basic_publish(
                exchange=self._config.exchange,
                routing_key=self._config.queue_for(message.task_type),
                body=message.encode(),
                properties=pika.BasicProperties(
                    delivery_mode=_PERSISTENT,
                    content_type="application/json",
                    message_id=message_id,
                    headers=dict(headers.get(message.dispatch_id, {})) or None,
                ),
                mandatory=True,
            )
            confirms.sent(message_id)
            observe.announce.dispatches_published(1)

    def _check_settled(self, confirms: Confirms, count: int) -> None:
        config = self._config
        if confirms.returned:
            observe.announce.dispatches_returned(len(confirms.returned))
            self._declared.clear()  # a queue went away: declare them all again
            raise errors.UnroutableDispatchError(
                f"RabbitMQ returned {len(confirms.returned)} of {count} dispatches "
                f"as unroutable: no queue is bound to exchange {config.exchange!r} with "
                f"their task type's routing key (<queue>.<type>, dispatch ids "
                f"{_sample(confirms.returned)}); was a queue deleted? The outbox rows "
                f"stay pending, and the next sweep declares the queues again."
            )
        if confirms.nacked:
            raise errors.PublishNotConfirmedError(
                f"RabbitMQ refused (nacked) {len(confirms.nacked)} of {count} "
                f"dispatches (dispatch ids {_sample(confirms.nacked)}); the queue may be "
                f"unavailable or full. They stay pending and are published again by the "
                f"next sweep."
            )

    def _open(self) -> tuple[pika.BlockingConnection, BlockingChannel, Confirms]:
        if self._connection is not None and self._channel is not None and self._confirms:
            return self._connection, self._channel, self._confirms
        connection = connect(self._config, name="flowforge-publisher")
        try:
            channel = connection.channel()
            if self._declare_queue:
                topology.declare_dispatch_queue(channel, self._config)
            else:
                topology.declare_exchange(channel, self._config.exchange, self._config)
            confirms = Confirms(connection)
            confirms.attach(channel)
            wait_until(
                connection,
                lambda: confirms.selected,
                channel_closed=lambda: confirms.closed_reason,
                deadline=time.monotonic() + CONNECT_TIMEOUT_S,
            )
        except BaseException as exc:
            close_quietly(connection)
            if isinstance(exc, (TimeoutError, ChannelClosedError, *translate.UNAVAILABLE)):
                translate.raise_unavailable(self._config, "open a confirmed channel on", exc)
            raise
        self._connection, self._channel, self._confirms = connection, channel, confirms
        return connection, channel, confirms


def _sample(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return f"{shown}, ... ({len(ids) - limit} more)" if len(ids) > limit else shown
