"""Publisher confirms, pipelined: the one shim over pika's asynchronous channel.

pika's ``BlockingChannel`` in confirm mode waits for each confirm before it sends the
next message: a broker round trip per message, where a batch's confirms can share one.
:class:`Confirms` instead registers callbacks on the channel underneath
(:func:`async_channel`) and counts the confirms of a whole batch.
"""

from __future__ import annotations

from itertools import takewhile

import pika
import pika.channel
import pika.frame
import pika.spec
from pika.adapters.blocking_connection import BlockingChannel


def async_channel(channel: BlockingChannel) -> pika.channel.Channel:
    """The asynchronous channel under a ``BlockingChannel``.

    Pipelining a batch's confirms needs the underlying channel, which pika keeps in
    ``_impl`` (stable since pika 0.10; pinned ``pika<2``). Used for publishing and
    confirms only; everything else goes through the blocking API.
    """
    return channel._impl  # type: ignore[attr-defined,no-any-return]


class Confirms:
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

    def attach(self, channel: BlockingChannel) -> None:
        """Put ``channel`` in confirm mode with this object's callbacks."""
        impl = async_channel(channel)
        impl.add_on_return_callback(self.on_return)
        impl.add_on_close_callback(self.on_channel_closed)
        impl.confirm_delivery(ack_nack_callback=self.on_confirm, callback=self.on_selected)

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
