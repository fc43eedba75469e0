"""Connection life: open with bounded timeouts, run pika's I/O loop, close quietly.

Connections are not thread-safe (pika's rule): each publisher and consumer owns one and
uses it from one thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import pika
import pika.exceptions

from flowforge import errors
from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import translate

logger = logging.getLogger(__name__)

#: TCP connect and AMQP handshake, each.
CONNECT_TIMEOUT_S: Final = 10.0
#: A connection the broker blocks (memory or disk alarm) for longer than this is
#: abandoned with ``BrokerUnavailableError`` instead of hanging the publisher.
BLOCKED_CONNECTION_TIMEOUT_S: Final = 60.0


class ChannelClosedError(Exception):
    """A channel was closed (by the broker) while a loop waited on it."""

    def __init__(self, reason: Exception | None) -> None:
        super().__init__(str(reason))
        self.reason = reason


def connect(
    config: BrokerConfig, *, name: str = "flowforge", timeout: float = CONNECT_TIMEOUT_S
) -> pika.BlockingConnection:
    """Open a blocking connection, or raise ``BrokerUnavailableError`` naming host and port.

    ``name`` shows in the management UI's connection list.
    """
    nodes = translate.node_parameters(config)
    for parameters in nodes:
        parameters.heartbeat = config.heartbeat_seconds
        parameters.blocked_connection_timeout = BLOCKED_CONNECTION_TIMEOUT_S
        parameters.socket_timeout = timeout
        parameters.stack_timeout = timeout
        # One attempt per node: retrying is the caller's loop's job, with backoff.
        parameters.connection_attempts = 1
        parameters.client_properties = {"connection_name": name}
    try:
        # With several nodes pika tries each in order and returns the first that
        # answers: a node that is down costs one refused connect, then the next is used.
        connection = pika.BlockingConnection(nodes)
    except translate.UNAVAILABLE as exc:
        translate.raise_unavailable(config, "connect to", exc)
    logger.info(
        "broker connected",
        extra={
            "action": "connect",
            "broker": translate.endpoint(config),
            "vhost": nodes[0].virtual_host,
            "connection_name": name,
        },
    )
    return connection


def check_reachable(config: BrokerConfig) -> None:
    """Fail fast, with one line naming host and port, if the broker is unreachable now."""
    close_quietly(connect(config, name="flowforge-startup-check"))


#: How long ``submit`` waits for the broker to accept its credentials.
REFUSAL_CHECK_TIMEOUT_S: Final = 3.0
#: What a broker that answered says when it will not have these credentials or vhost.
_REFUSALS = (
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
    pika.exceptions.ConnectionClosedByBroker,
)


def check_not_refused(config: BrokerConfig) -> str | None:
    """Raise ``BrokerUnavailableError`` (with the broker's own reason) if the broker
    answers and refuses this URL's credentials or virtual host: nothing would ever be
    dispatched. None if it accepts them; if it cannot be reached now, why (a run's
    dispatches wait in its outbox until it can)."""
    try:
        close_quietly(
            connect(config, name="flowforge-submit-check", timeout=REFUSAL_CHECK_TIMEOUT_S)
        )
    except errors.BrokerUnavailableError as exc:
        if isinstance(exc.__cause__, _REFUSALS):
            raise
        return str(exc)
    return None


def process_events(connection: pika.BlockingConnection, seconds: float) -> None:
    # types-pika declares time_limit as int; pika takes (and documents) a float.
    connection.process_data_events(time_limit=seconds)  # type: ignore[arg-type]


def wait_until(
    connection: pika.BlockingConnection,
    done: Callable[[], bool],
    *,
    channel_closed: Callable[[], Exception | None],
    deadline: float,
) -> None:
    """Run pika's I/O loop until ``done()``; ``TimeoutError`` at ``deadline``."""
    while not done():
        if (reason := channel_closed()) is not None:
            raise ChannelClosedError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        process_events(connection, remaining)


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    """Close a connection that may already be dead; a failure to close is not news."""
    if connection is None or connection.is_closed:
        return
    try:
        connection.close()
    except translate.UNAVAILABLE as exc:
        logger.debug(
            "broker connection did not close cleanly",
            extra={"action": "close", "error": type(exc).__name__},
        )
