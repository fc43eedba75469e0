"""What the application service needs from the outside, as protocols it owns.

The processes layer implements these (``flowforge.processes.transport`` and
``flowforge.processes.rabbitmq``); the service depends only on the protocol, so no
import runs from ``app`` back up to ``processes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage


@runtime_checkable
class DispatchPublisher(Protocol):
    """Puts dispatches on the dispatch queue."""

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        """Return only when the broker has confirmed every message.

        ``headers``: what each message carries besides its body, by dispatch id
        (``flowforge.aggregates.dispatch.READY_AT_HEADER``, a trace context); the
        consumer's delivery gives them back (``Delivery.headers``).

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


@dataclass(frozen=True, slots=True)
class QueueState:
    """A task type's dispatch queue as the broker sees it at one moment."""

    queue: str
    exists: bool
    #: Messages ready to be delivered (not those a consumer holds).
    messages: int
    #: Consumers on it: the workers (threads) that can take its dispatches.
    consumers: int


class QueueProbe(Protocol):
    """Asks the broker about a task type's queue; ``None`` if it cannot be asked."""

    def __call__(self, task_type: str) -> QueueState | None: ...
