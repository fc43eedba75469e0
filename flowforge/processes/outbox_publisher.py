"""The publisher process: outbox rows to the dispatch queue, until stopped."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flowforge import errors, observe
from flowforge.app.results import WakeupBell
from flowforge.app.scope import Scope
from flowforge.app.service import FlowForge
from flowforge.backoff import Backoff
from flowforge.processes.loop import LISTEN_READY_S, Stop
from flowforge.processes.transport import DispatchPublisher

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
DEFAULT_INTERVAL_S = 0.2


class Publisher:
    """Sweeps the outbox: publishes pending rows with confirms, marks them delivered.

    A full batch is followed at once by the next, so a backlog drains at the broker's
    pace; an empty sweep waits ``interval``. A broker outage leaves every row pending
    and backs off (capped, jittered) until the broker returns.
    """

    def __init__(
        self,
        app: FlowForge,
        connect: Callable[[], DispatchPublisher],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        interval: float = DEFAULT_INTERVAL_S,
        stop: Stop | None = None,
        backoff: Backoff | None = None,
        scope: Scope | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.app = app
        self._connect = connect
        self._publisher: DispatchPublisher | None = None
        self.batch_size = batch_size
        self.interval = interval
        self.stop = stop or Stop()
        self.backoff = backoff or Backoff()
        #: Whose dispatches this publisher sends (all, if None): an embedded runner's
        #: own run's, or its task types' (ProcessGroup, ``app/scope.py``).
        self.scope = scope

    def sweep(self) -> int:
        """Publish one batch; how many rows were delivered."""
        if self._publisher is None:
            self._publisher = self._connect()
        try:
            return self.app.publish_pending_dispatches(
                self._publisher, self.batch_size, scope=self.scope
            )
        except errors.BrokerError:
            self.close()
            raise

    def drain(self) -> int:
        """Sweep until the outbox is empty; how many rows were delivered."""
        total = 0
        while (published := self.sweep()) > 0:
            total += published
        return total

    def run(self) -> None:
        """Sweep whenever an outbox row commits (its NOTIFY, or this process's bell),
        and every ``interval`` anyway: the poll is the safety net for a lost wake-up."""
        self.stop.install_signal_handlers()
        log.info("publisher started", extra={"batch_size": self.batch_size})
        with self.app.listening(ready_timeout=LISTEN_READY_S) as wakeups:
            self.stop.also_wakes(wakeups.outbox.ring)
            self._loop(wakeups.outbox)
        self.close()
        log.info("publisher stopped", extra={"reason": self.stop.reason})

    def _loop(self, outbox: WakeupBell) -> None:
        while not self.stop.is_set():
            try:
                published = self.sweep()
                # A sweep that went through is proof of health: a later outage is new.
                self.backoff.reset()
            except errors.QueueTypeMismatchError:
                self.close()
                raise
            except (errors.BrokerError, errors.PersistenceError) as exc:
                server = "broker" if isinstance(exc, errors.BrokerError) else "database"
                observe.announce.reconnected(server)
                delay = self.backoff.next_delay()
                log.log(
                    logging.WARNING if self.backoff.worth_a_warning else logging.INFO,
                    "publish failed; rows stay pending",
                    extra={
                        "error": str(exc),
                        "attempt": self.backoff.failures,
                        "retry_in_s": delay,
                    },
                )
                self.stop.wait(delay)
                continue
            if published < self.batch_size:
                outbox.wait(self.interval)

    def close(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            publisher.close()
