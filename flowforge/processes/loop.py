"""What every long-running process shares: a stop request, signals, and backoff waits.

Each process has the same shape: ``run()`` sets up, then loops on "work arrived | poll
interval passed | stop requested". A stop (SIGTERM, SIGINT, or :meth:`Stop.set` from
another thread) wakes every wait at once, including a reconnect backoff, so a shutdown
never sits out a delay.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable

from flowforge.processes.signals import relay_signals

log = logging.getLogger(__name__)

#: Reconnect backoff: exponential from the base, capped, with full jitter. The cap is
#: what bounds how late a returning broker is noticed, so it is low: a probe of a broker
#: that is down is one refused TCP connect, and even a fleet of a hundred processes
#: probing about twice a second each is nothing to a broker node. (It was 30 s: dispatch
#: then resumed up to 30 s after the broker came back.)
RECONNECT_BACKOFF_BASE_S = 0.25
RECONNECT_BACKOFF_CAP_S = 1.0
#: A connection that stayed up this long was healthy: the next outage starts the
#: backoff from the base again, instead of where the last outage left it.
RECONNECT_BACKOFF_RESET_AFTER_S = 60.0
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
        """SIGTERM and SIGINT request a stop (main thread only; elsewhere, or a second
        time, a no-op). Relayed to a thread: ``flowforge.processes.signals`` says why."""
        if threading.current_thread() is not threading.main_thread() or self._relayed:
            return
        self._relayed = True

        def react(signum: signal.Signals) -> None:
            log.info("stop requested", extra={"signal": signum.name})
            self.set(signum.name)

        relay_signals(react)


def backoff_delay(
    attempt: int,
    rand: float,
    *,
    base: float = RECONNECT_BACKOFF_BASE_S,
    cap: float = RECONNECT_BACKOFF_CAP_S,
) -> float:
    """Seconds to wait before retry ``attempt`` (0 for the first retry).

    Exponential with FULL jitter: uniform in ``[0, min(cap, base * 2**attempt))``, given
    ``rand`` uniform in ``[0, 1)`` (pass ``random.random()``; a test passes a constant).
    Full jitter spreads a fleet of workers that lost the broker at the same moment
    across the whole window, so they do not reconnect in lock-step when it returns;
    the cost is that one attempt may retry almost at once, which is harmless because
    the next window is twice as wide. Never more than ``cap``.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if not 0.0 <= rand <= 1.0:
        raise ValueError(f"rand must be in [0, 1], got {rand}")
    # min() on the exponent first: 2**10_000 is a valid int but an overflowing float.
    ceiling = min(cap, base * 2.0 ** min(attempt, 64))
    return float(ceiling * rand)


class Backoff:
    """The reconnect waits of one loop: growing while the server stays away, reset by a
    healthy period.

    :meth:`next_delay` is the wait before the next attempt (``backoff_delay`` of the
    failures so far). :meth:`connected` marks that a connection works; once it has
    worked for ``reset_after`` seconds, the next outage is a new one and starts from
    the base. Without that, a long-lived process that survived a few outages would
    wait the cap after every later blip, however healthy it was in between.
    """

    def __init__(
        self,
        *,
        base: float = RECONNECT_BACKOFF_BASE_S,
        cap: float = RECONNECT_BACKOFF_CAP_S,
        reset_after: float = RECONNECT_BACKOFF_RESET_AFTER_S,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base, self._cap, self._reset_after = base, cap, reset_after
        self._rand, self._clock = rand, clock
        self.failures = 0
        self._healthy_since: float | None = None

    def connected(self) -> None:
        """A connection works (the first call after an outage starts the healthy period)."""
        if self._healthy_since is None:
            self._healthy_since = self._clock()

    def reset(self) -> None:
        """Start again from the base at the next failure."""
        self.failures = 0
        self._healthy_since = None

    @property
    def worth_a_warning(self) -> bool:
        """Whether to log the latest failure as a warning: the first of an outage, then
        the 2nd, 4th, 8th...: a long outage is reported without a line per probe."""
        return self.failures & (self.failures - 1) == 0

    def next_delay(self) -> float:
        """Record a failure; seconds to wait before the next attempt."""
        since = self._healthy_since
        if since is not None and self._clock() - since >= self._reset_after:
            self.failures = 0
        self._healthy_since = None
        self.failures += 1
        return backoff_delay(self.failures - 1, self._rand(), base=self._base, cap=self._cap)
