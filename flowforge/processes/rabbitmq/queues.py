"""The operator's side of the task queues: what one holds and who consumes it (for
``flowforge why``), and the upgrade from the single dispatch queue of a FlowForge
before routing (``flowforge broker migrate``).

The upgrade moves each message of the old queue to its task type's queue with the
publisher's own guarantees (confirms, mandatory routing, the type's queue declared
first) and acks it on the old queue only after the confirm: a crash in between leaves
the message in both queues, never in neither, and the worker's claim makes the
duplicate harmless (it claims nothing and is acked without running).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from flowforge import errors
from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch, text_headers
from flowforge.app.ports import QueueState
from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import topology, translate
from flowforge.processes.rabbitmq.connection import close_quietly, connect
from flowforge.processes.rabbitmq.dispatch_publisher import RabbitDispatchPublisher

logger = logging.getLogger(__name__)

#: Messages moved per confirmed publish (and one multiple-ack on the old queue).
MOVE_BATCH: Final = 200
#: How long the old queue's consumer count may take to settle at zero (see
#: ``_delete_if_done``), and how often it is read meanwhile.
SETTLE_S: Final = 5.0
SETTLE_POLL_S: Final = 0.2


def queue_state(config: BrokerConfig, task_type: str) -> QueueState:
    """``task_type``'s queue as the broker sees it now (a passive declare: nothing is
    created). ``BrokerUnavailableError`` if the broker cannot be asked."""
    queue = config.queue_for(task_type)
    connection = connect(config, name="flowforge-inspect")
    try:
        counts = _counts(connection, queue)
        # Workers of several types are counted on the presence queue (consumer.py).
        present = _counts(connection, topology.presence_queue(config, task_type))
    except translate.UNAVAILABLE as exc:
        translate.raise_unavailable(config, "inspect a queue on", exc)
    finally:
        close_quietly(connection)
    if counts is None:
        return QueueState(queue=queue, exists=False, messages=0, consumers=0)
    messages, consumers = counts
    consumers += present[1] if present else 0
    return QueueState(queue=queue, exists=True, messages=messages, consumers=consumers)


def _counts(connection: pika.BlockingConnection, queue: str) -> tuple[int, int] | None:
    """``queue``'s ready messages and consumers, or None if it does not exist: a passive
    declare on a channel of its own (the broker closes a channel that names a missing
    queue)."""
    channel = connection.channel()
    try:
        method = channel.queue_declare(queue, passive=True).method
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == translate.NOT_FOUND:
            return None
        raise
    channel.close()
    return int(method.message_count or 0), int(method.consumer_count or 0)


@dataclass
class Migration:
    """What ``migrate_single_queue`` did."""

    #: The old single queue (``BrokerConfig.queue``).
    queue: str
    existed: bool = False
    #: Messages moved, by task type.
    moved: dict[str, int] = field(default_factory=dict)
    #: Messages that were no dispatch, dead-lettered as a worker would.
    dead_lettered: int = 0
    #: Consumers (workers of the old FlowForge) still on the old queue at the end.
    consumers: int = 0
    #: Messages still on the old queue at the end: held unacked by those consumers.
    left: int = 0
    deleted: bool = False


def migrate_single_queue(
    config: BrokerConfig, batch: int = MOVE_BATCH, settle_seconds: float = SETTLE_S
) -> Migration:
    """Move every dispatch waiting on the old single queue to its type's queue, then
    delete the old queue if it is empty and nobody consumes it.

    Safe to run at any time and as often as wanted: with new publishers already
    running, with old workers still consuming (what they hold unacked stays theirs;
    run it again once they have stopped), and after a crash of a previous run.
    """
    migration = Migration(queue=config.queue)
    publisher = RabbitDispatchPublisher(config)
    connection = connect(config, name="flowforge-migrate")
    try:
        channel = connection.channel()
        if _counts(connection, config.queue) is None:
            return migration
        migration.existed = True
        while _move_batch(channel, publisher, config, batch, migration):
            pass
        # Closed first: a quorum queue counts a channel that took messages with
        # basic.get among its consumers until the channel closes.
        channel.close()
        _delete_if_done(connection, config, migration, settle_seconds)
    except translate.UNAVAILABLE as exc:
        translate.raise_unavailable(config, "migrate the dispatch queue on", exc)
    finally:
        publisher.close()
        close_quietly(connection)
    return migration


def _move_batch(
    channel: BlockingChannel,
    publisher: RabbitDispatchPublisher,
    config: BrokerConfig,
    batch: int,
    migration: Migration,
) -> bool:
    """Move up to ``batch`` messages; whether any was there."""
    messages: list[DispatchMessage] = []
    headers: dict[UUID, dict[str, str]] = {}
    last_tag = 0
    method = None
    for _ in range(batch):
        method, properties, body = channel.basic_get(config.queue, auto_ack=False)
        if method is None:
            break
        assert method.delivery_tag is not None  # always set on a Basic.GetOk
        assert isinstance(body, bytes)
        try:
            messages.append(decode_dispatch(body))
            # What it carried besides its body goes with it (a broker's own headers,
            # which are not text, do not).
            headers[messages[-1].dispatch_id] = text_headers(properties.headers or {})
            last_tag = method.delivery_tag
        except errors.MalformedDispatchError as exc:
            # Its queue's dead-letter exchange keeps it for the operator, as a worker's
            # reject would: moving it would only make a worker dead-letter it later.
            channel.basic_reject(method.delivery_tag, requeue=False)
            migration.dead_lettered += 1
            logger.warning("malformed dispatch dead-lettered", extra={"error": str(exc)})
    if messages:
        publisher.publish(messages, headers)  # confirmed: only now may the old copies go
        channel.basic_ack(last_tag, multiple=True)
        for message in messages:
            migration.moved[message.task_type] = migration.moved.get(message.task_type, 0) + 1
    return method is not None  # a full batch: there may be more


def _delete_if_done(
    connection: pika.BlockingConnection,
    config: BrokerConfig,
    migration: Migration,
    settle_seconds: float,
) -> None:
    """Delete the old queue once nothing waits on it and no old worker consumes it.

    A quorum queue updates its consumer count asynchronously (a channel that took
    messages with basic.get, or a consumer that just went, is counted a little
    longer), so the counts are read until they settle at zero, for ``settle_seconds``
    at most. Quorum queues refuse ``if-empty`` and ``if-unused``, so the last check is a
    passive declare just before the delete: a message published to the old queue in
    between would be lost, which is why the procedure upgrades (or stops) every old
    publisher first. A dispatch another migration took but has not acked yet is safe:
    it is published to its type's queue before that ack.
    """
    deadline = time.monotonic() + settle_seconds
    while True:
        counts = _counts(connection, config.queue)
        if counts is None:
            return  # deleted meanwhile (by another migration)
        migration.left, migration.consumers = counts
        if migration.left:
            return  # arrived meanwhile (an old worker let one go): run again
        if not migration.consumers:
            break
        if time.monotonic() >= deadline:
            return
        connection.sleep(SETTLE_POLL_S)
    connection.channel().queue_delete(config.queue)
    migration.deleted = True
