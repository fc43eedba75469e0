"""Capped, jittered exponential backoff: the waits between attempts at something that
keeps failing (a broker or database that is away, an outcome that cannot be written).

A low module of its own, so that ``processes`` and ``projections`` share one
implementation without one importing the other.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

#: Reconnect backoff: exponential from the base, capped, with full jitter. The cap is
#: what bounds how late a returning broker is noticed, so it is low: a probe of a broker
#: that is down is one refused TCP connect, and even a fleet of a hundred processes
#: probing about twice a second each is nothing to a broker node; a higher cap delays
#: noticing a returned broker by up to the cap.
RECONNECT_BACKOFF_BASE_S = 0.25
RECONNECT_BACKOFF_CAP_S = 1.0
#: A connection that stayed up this long was healthy: the next outage starts the
#: backoff from the base again, instead of where the last outage left it.
RECONNECT_BACKOFF_RESET_AFTER_S = 60.0


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
