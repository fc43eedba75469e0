"""What every long-running process shares: a stop request, signals, and backoff waits.

Each process has the same shape: ``run()`` sets up, then loops on "work arrived | poll
interval passed | stop requested". A stop (SIGTERM, SIGINT, or :meth:`Stop.set` from
another thread) wakes every wait at once, including a reconnect backoff, so a shutdown
never sits out a delay.
"""

from __future__ import annotations

import logging
import math
import random
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

#: Reconnect backoff: exponential from the base, capped, with full jitter. The cap is
#: what bounds how late a returning broker is noticed, so it is low: a probe of a broker
#: that is down is one refused TCP connect, and even a fleet of a hundred processes
#: probing about twice a second each is nothing to a broker node. (It was 30 s: dispatch
#: then resumed up to 30 s after the broker came back.)
RECONNECT_BACKOFF_BASE_S = 0.25
RECONNECT_BACKOFF_CAP_S = 1.0
#: A failure this long after the previous one starts a new outage: the backoff starts
#: again from the base instead of at the cap.
HEALTHY_RESET_S = 10.0


class Stop:
    """A stop request shared by a process's loops and threads."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def set(self, reason: str = "requested") -> None:
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as a stop is requested."""
        return self._event.wait(max(0.0, seconds))

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT request a stop (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("stop requested", extra={"signal": signal.Signals(signum).name})
            self.set(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)


def backoff_delay(attempt: int, rand: float) -> float:
    """Seconds to wait before retry ``attempt`` (0 for the first retry).

    Exponential with FULL jitter: uniform in ``[0, min(cap, base * 2**attempt))``, given
    ``rand`` uniform in ``[0, 1)`` (pass ``random.random()``; a test passes a constant).
    Full jitter spreads a fleet of workers that lost the broker at the same moment
    across the whole window, so they do not reconnect in lock-step when it returns;
    the cost is that one attempt may retry almost at once, which is harmless because
    the next window is twice as wide. Never more than ``RECONNECT_BACKOFF_CAP_S``.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if not 0.0 <= rand <= 1.0:
        raise ValueError(f"rand must be in [0, 1], got {rand}")
    # min() on the exponent first: 2**10_000 is a valid int but an overflowing float.
    ceiling = min(RECONNECT_BACKOFF_CAP_S, RECONNECT_BACKOFF_BASE_S * 2.0 ** min(attempt, 64))
    return float(ceiling * rand)


class Backoff:
    """The waits of one process between reconnect attempts, across outages.

    Each failure returns the next wait (``backoff_delay``); a failure that comes
    ``HEALTHY_RESET_S`` after the previous one (the connection worked in between) starts
    from the base again. A broker that flaps (accepts, then fails at once) therefore
    stays at the cap instead of being retried from the base every time.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._clock = clock
        self._rand = rand
        self._last_failure = -math.inf
        #: Failures in the current outage (1 after the first).
        self.attempt = 0

    def failed(self) -> float:
        """Record a failure; the seconds to wait before the next attempt."""
        now = self._clock()
        if now - self._last_failure >= HEALTHY_RESET_S:
            self.attempt = 0
        self._last_failure = now
        self.attempt += 1
        return backoff_delay(self.attempt - 1, self._rand())

    @property
    def worth_a_warning(self) -> bool:
        """Whether to log this failure as a warning: the first of an outage, then the
        2nd, 4th, 8th...: a long outage is reported without a line per probe."""
        return self.attempt & (self.attempt - 1) == 0
