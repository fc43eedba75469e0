"""What every long-running process shares: a stop request and signals.

Each process has the same shape: ``run()`` sets up, then loops on "work arrived | poll
interval passed | stop requested". A stop (SIGTERM, SIGINT, or :meth:`Stop.set` from
another thread) wakes every wait at once, including a reconnect backoff
(``flowforge.backoff``), so a shutdown never sits out a delay.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from flowforge.processes.signals import relay_signals

log = logging.getLogger(__name__)

#: How long a loop waits at start for its wake-up LISTEN to be in place (a database
#: that is down does not hold it up longer: the periodic pass covers until then).
LISTEN_READY_S = 5.0


class Stop:
    """A stop request shared by a process's loops and threads."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self._wakes: list[Callable[[], None]] = []
        self._relayed = False
        #: A second SIGINT/SIGTERM while a stop is under way: stop waiting at once.
        self.hurry = threading.Event()

    def set(self, reason: str = "requested") -> None:
        if not self._event.is_set():
            self.reason = reason
        self._event.set()
        for wake in list(self._wakes):
            wake()

    def also_wakes(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` on a stop too: a loop sleeping on its own bell (a wake-up)
        is woken by a stop as well."""
        self._wakes.append(wake)

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as a stop is requested."""
        return self._event.wait(max(0.0, seconds))

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT request a stop; a SIGINT (a second Ctrl-C) while it is
        under way sets :attr:`hurry` (stop waiting for the tasks in hand). Not a second
        SIGTERM: a process group's kill and ``timeout``'s forward of it arrive together,
        and ask for one graceful stop. Main thread only; elsewhere, or a second time, a
        no-op. Relayed to a thread: ``flowforge.processes.signals`` says why."""
        if threading.current_thread() is not threading.main_thread() or self._relayed:
            return
        self._relayed = True

        def react(signum: signal.Signals) -> None:
            if self.is_set() and signum == signal.SIGINT:
                log.warning("second stop requested: stopping now", extra={"signal": signum.name})
                self.hurry.set()
                return
            if self.is_set():
                return
            log.info("stop requested", extra={"signal": signum.name})
            self.set(signum.name)

        relay_signals(react)
