"""A RabbitMQ delivery, and how each settle action becomes an AMQP method.

The delivery does not reach into its consumer: it settles through a :class:`Settler`,
the one public method the consumer offers for it, which knows whether the delivery's
channel is still the live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pika.adapters.blocking_connection import BlockingChannel

from flowforge.processes import transport


class Settler(Protocol):
    """Settles a delivery on the channel it came from (the consumer)."""

    def settle(
        self, channel: BlockingChannel, delivery_tag: int, action: transport.SettleAction
    ) -> None: ...


def send_settlement(
    channel: BlockingChannel, delivery_tag: int, action: transport.SettleAction
) -> None:
    """The AMQP method for ``action``."""
    if action == "ack":
        channel.basic_ack(delivery_tag)
    elif action == "requeue":
        channel.basic_nack(delivery_tag, requeue=True)
    else:
        # Reject without requeue: the queue dead-letters it to the dead-letter exchange.
        channel.basic_reject(delivery_tag, requeue=False)


class RabbitDelivery(transport.SettleOnce):
    """A ``Delivery`` from :class:`~flowforge.processes.rabbitmq.RabbitDispatchConsumer`."""

    def __init__(
        self,
        settler: Settler,
        channel: BlockingChannel,
        delivery_tag: int,
        body: bytes,
        redelivered: bool,
        headers: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(body, redelivered, headers)
        self._settler = settler
        self._channel = channel
        self._tag = delivery_tag

    @property
    def channel(self) -> BlockingChannel:
        """The channel it came on: only there can it be settled."""
        return self._channel

    @property
    def delivery_tag(self) -> int:
        return self._tag

    def _settle(self, action: transport.SettleAction) -> None:
        self._settler.settle(self._channel, self._tag, action)
