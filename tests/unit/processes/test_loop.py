"""The shared loop's pieces: reconnect backoff and the stop request."""

from __future__ import annotations

import threading

import pytest

from flowforge.processes import loop


def test_backoff_ceiling_doubles_from_the_base_per_attempt() -> None:
    base = loop.RECONNECT_BACKOFF_BASE_S
    assert [loop.backoff_delay(attempt, 1.0) for attempt in range(4)] == [
        base,
        2 * base,
        4 * base,
        8 * base,
    ]


@pytest.mark.parametrize("attempt", [10, 50, 10_000])
def test_backoff_never_exceeds_the_cap(attempt: int) -> None:
    assert loop.backoff_delay(attempt, 1.0) == loop.RECONNECT_BACKOFF_CAP_S == 30.0


def test_backoff_is_full_jitter_scaled_by_rand() -> None:
    ceiling = loop.backoff_delay(3, 1.0)
    assert loop.backoff_delay(3, 0.0) == 0.0
    assert loop.backoff_delay(3, 0.25) == pytest.approx(ceiling / 4)


@pytest.mark.parametrize(("attempt", "rand"), [(-1, 0.5), (0, -0.1), (0, 1.5)])
def test_backoff_rejects_a_negative_attempt_or_rand_outside_the_unit_interval(
    attempt: int, rand: float
) -> None:
    with pytest.raises(ValueError, match="must be"):
        loop.backoff_delay(attempt, rand)


def test_a_stop_interrupts_a_long_wait_at_once() -> None:
    stop = loop.Stop()
    waiting = threading.Barrier(2)
    result: list[bool] = []

    def wait() -> None:
        waiting.wait()
        result.append(stop.wait(60))

    thread = threading.Thread(target=wait)
    thread.start()
    waiting.wait()
    stop.set("test")
    thread.join(5)
    assert not thread.is_alive()
    assert result == [True]
    assert stop.reason == "test"
