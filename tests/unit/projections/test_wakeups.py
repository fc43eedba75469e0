"""The wake-up listener's reconnect waits (flowforge/projections/wakeups.py)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from flowforge.projections.wakeups import RECONNECT_CAP_S, PostgresListener, Wakeups

#: Reconnect attempts to watch: enough to reach the cap and stay there.
ATTEMPTS = 8


class StopAfterWaits(threading.Event):
    """The listener's stop event: records each wait, and is set after ``ATTEMPTS``."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        if len(self.waits) == ATTEMPTS:
            self.set()
        return self.is_set()


def refused() -> psycopg.Connection[Any]:
    raise psycopg.OperationalError("connection refused")


def test_the_listener_retries_a_lost_database_after_doubling_waits_up_to_the_cap() -> None:
    listener = PostgresListener(refused, Wakeups())
    stop = StopAfterWaits()
    listener._stopped = stop  # the loop waits on this event between attempts
    listener._run()  # in this thread, to its end
    assert stop.waits == [
        0.2,
        0.4,
        0.8,
        1.6,
        3.2,
        RECONNECT_CAP_S,
        RECONNECT_CAP_S,
        RECONNECT_CAP_S,
    ]


def test_either_bell_rings_when_either_rings_and_only_while_its_block_runs() -> None:
    wakeups = Wakeups()
    with wakeups.either() as either:
        assert not either.wait(0)
        wakeups.outbox.ring()
        assert either.wait(0)
        wakeups.runs.ring()
        assert either.wait(0)
        assert not either.wait(0)  # a wait clears it
    wakeups.runs.ring()
    wakeups.outbox.ring()
    assert not either.wait(0)  # no longer an echo of either
    assert wakeups.runs.wait(0) and wakeups.outbox.wait(0)  # the bells rang all the same
