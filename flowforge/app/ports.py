"""What the application service needs from the outside, as protocols it owns.

The processes layer implements these (``flowforge.processes.transport`` and
``flowforge.processes.rabbitmq``); the service depends only on the protocol, so no
import runs from ``app`` back up to ``processes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from flowforge.aggregates.dispatch import DispatchMessage


@runtime_checkable
class DispatchPublisher(Protocol):
    """Puts dispatches on the dispatch queue."""

    def publish(self, messages: Sequence[DispatchMessage]) -> None:
        """Return only when the broker has confirmed every message.

        Raises ``UnroutableDispatchError`` (no queue bound), ``PublishNotConfirmedError``
        (the broker refused or did not confirm) or ``BrokerUnavailableError``. After an
        error some messages may still have been delivered: the caller keeps all of them
        pending and publishes them again, and the worker's claim makes a duplicate
        harmless.
        """
        ...

    def close(self) -> None:
        """Release the connection; a later ``publish`` opens a new one."""
        ...
