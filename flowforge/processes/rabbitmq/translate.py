"""pika's errors become FlowForge's, here and nowhere else (chained, never a bare pika
traceback). Every message names the broker's ``host:port``, never its credentials, and
says what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, NoReturn

import pika
import pika.exceptions

from flowforge import errors
from flowforge.config import BrokerConfig

logger = logging.getLogger(__name__)

NOT_FOUND: Final = 404
PRECONDITION_FAILED: Final = 406

#: Errors that mean "the connection or channel is gone", translated to
#: ``BrokerUnavailableError``: every pika error (connection and channel closures, stream
#: loss, heartbeat and blocked timeouts, wrong-state calls on a dead channel) and OSError
#: for a socket error pika did not wrap. Broker refusals are translated before these.
UNAVAILABLE: Final = (pika.exceptions.AMQPError, OSError)

#: Where the operator's migration procedure is told in full.
MIGRATION_DOC: Final = 'docs/delivery.md, "Migrating from a classic queue"'


def parameters(config: BrokerConfig) -> pika.URLParameters:
    try:
        return pika.URLParameters(config.url)
    except ValueError as exc:
        raise errors.ConfigurationError(
            f"FLOWFORGE_BROKER_URL is not a URL pika accepts ({exc}); check its query options."
        ) from exc


def endpoint(config: BrokerConfig) -> str:
    """``host:port`` of the broker, never the credentials."""
    params = parameters(config)
    return f"{params.host}:{params.port}"


def raise_unavailable(config: BrokerConfig, action: str, exc: BaseException) -> NoReturn:
    where = endpoint(config)
    logger.warning(
        "broker unavailable",
        extra={"action": action, "broker": where, "error": type(exc).__name__},
    )
    hint = (
        "Check the user name and password in FLOWFORGE_BROKER_URL"
        if isinstance(exc, pika.exceptions.ProbableAuthenticationError)
        else "Check FLOWFORGE_BROKER_URL and that RabbitMQ is running and reachable"
    )
    raise errors.BrokerUnavailableError(
        f"Cannot {action} RabbitMQ at {where} ({exc!r}). {hint}."
    ) from exc


@contextmanager
def unavailable_on_error(
    config: BrokerConfig, action: str, *, drop: Callable[[], None]
) -> Iterator[None]:
    """Call ``drop`` (close the connection) on any error; translate pika's errors."""
    try:
        yield
    except errors.FlowForgeError:
        drop()
        raise
    except UNAVAILABLE as exc:
        drop()
        raise_unavailable(config, action, exc)


def raise_channel_closed(config: BrokerConfig, reason: Exception | None) -> NoReturn:
    """The publisher's channel was closed by the broker while it waited for confirms."""
    if (
        isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        and reason.reply_code == NOT_FOUND
    ):
        raise errors.UnroutableDispatchError(
            f"RabbitMQ at {endpoint(config)} has no exchange {config.exchange!r} "
            f"({reason.reply_text}). Start a worker, which declares the topology; the "
            f"outbox rows stay pending."
        ) from reason
    raise_unavailable(config, "publish to", reason or ConnectionError("channel closed"))


@contextmanager
def refusals(config: BrokerConfig, what: str, *, queue: str | None = None) -> Iterator[None]:
    """Translate the broker refusing a declaration; connection loss passes through."""
    try:
        yield
    except pika.exceptions.ChannelClosedByBroker as exc:
        # Any PRECONDITION_FAILED on a queue, not only one naming x-queue-type: RabbitMQ
        # compares the arguments in a fixed order and reports the first that differs,
        # and x-queue-type comes late. A classic queue declared without arguments is
        # reported as "inequivalent arg 'x-dead-letter-exchange'". The remedy is the
        # same whatever the differing argument, and retrying never helps.
        if queue is not None and exc.reply_code == PRECONDITION_FAILED:
            logger.error(
                "dispatch queue exists with another type or arguments",
                extra={"action": "declare", "queue": queue, "reply": exc.reply_text},
            )
            raise errors.QueueTypeMismatchError(
                queue_mismatch_message(config, queue, exc.reply_text)
            ) from exc
        raise errors.BrokerError(
            f"RabbitMQ at {endpoint(config)} refused to declare {what}: {exc.reply_code} "
            f"{exc.reply_text}. If it exists with other settings than FlowForge declares "
            f"(another type, arguments or durability), delete it with rabbitmqctl and let "
            f"the worker declare it again."
        ) from exc


def queue_mismatch_message(config: BrokerConfig, queue: str, reply_text: str) -> str:
    """What was found, and the short procedure; the reasons are in ``MIGRATION_DOC``."""
    vhost = parameters(config).virtual_host
    vhost_option = "" if vhost == "/" else f" -p {vhost}"
    if queue == config.dead_letter_queue:
        step_2 = "Move its dead letters first: deleting the queue deletes them."
    else:
        step_2 = (
            "Wait for the queue to drain, or accept the loss of unacked dispatches: the "
            "outbox still holds every row that was not confirmed, and the tasks of "
            "unacked ones are recovered by the lease reaper."
        )
    found = (
        "is not a quorum queue"
        if "'x-queue-type'" in reply_text
        else "was declared with other arguments than this FlowForge declares"
    )
    return (
        f"The queue {queue!r} already exists and {found} (RabbitMQ: {reply_text}). A "
        f"queue's type and arguments cannot be changed in place. To migrate it:\n"
        f"  1. Stop the worker and the publisher.\n"
        f"  2. {step_2}\n"
        f"  3. Delete the queue: rabbitmqctl delete_queue{vhost_option} {queue}\n"
        f"  4. Start the worker. It redeclares the queue as a quorum queue and binds it.\n"
        f"  5. Start the publisher.\n"
        f"Why each step, and what is at risk: {MIGRATION_DOC}."
    )
