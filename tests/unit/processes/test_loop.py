"""The shared loop's pieces: reconnect backoff and the stop request."""

from __future__ import annotations

import threading

import pytest

from flowforge.processes import loop


def test_backoff_ceiling_doubles_from_the_base_per_attempt() -> None:
    base = loop.RECONNECT_BACKOFF_BASE_S
    assert 4 * base <= loop.RECONNECT_BACKOFF_CAP_S
    assert [loop.backoff_delay(attempt, 1.0) for attempt in range(3)] == [
        base,
        2 * base,
        4 * base,
    ]


@pytest.mark.parametrize("attempt", [10, 50, 10_000])
def test_backoff_never_exceeds_the_cap(attempt: int) -> None:
    assert loop.backoff_delay(attempt, 1.0) == loop.RECONNECT_BACKOFF_CAP_S


def test_the_cap_lets_a_returning_broker_be_noticed_within_about_a_second() -> None:
    assert loop.RECONNECT_BACKOFF_CAP_S <= 1.0


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


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _failures(backoff: loop.Backoff, clock: _Clock, gaps: list[float]) -> list[float]:
    """The waits after failures that come ``gaps`` seconds apart."""
    waits = []
    for gap in gaps:
        clock.now += gap
        waits.append(backoff.failed())
    return waits


def test_a_backoff_grows_from_the_base_to_the_cap_through_an_outage() -> None:
    clock = _Clock()
    backoff = loop.Backoff(clock=clock, rand=lambda: 1.0)
    waits = _failures(backoff, clock, [0.0, 0.25, 0.5, 1.0, 1.0, 1.0])
    base, cap = loop.RECONNECT_BACKOFF_BASE_S, loop.RECONNECT_BACKOFF_CAP_S
    assert waits == [base, 2 * base, 4 * base, cap, cap, cap]
    assert backoff.attempt == 6


def test_a_backoff_starts_from_the_base_again_after_a_healthy_period() -> None:
    clock = _Clock()
    backoff = loop.Backoff(clock=clock, rand=lambda: 1.0)
    _failures(backoff, clock, [0.0, 0.5, 0.5, 0.5, 0.5])
    (wait,) = _failures(backoff, clock, [loop.HEALTHY_RESET_S])
    assert wait == loop.RECONNECT_BACKOFF_BASE_S
    assert backoff.attempt == 1


def test_a_flapping_broker_keeps_the_backoff_at_the_cap() -> None:
    # Connected for a moment between failures, but never for a healthy period.
    clock = _Clock()
    backoff = loop.Backoff(clock=clock, rand=lambda: 1.0)
    waits = _failures(backoff, clock, [0.0] + [loop.HEALTHY_RESET_S / 2] * 8)
    assert waits[-4:] == [loop.RECONNECT_BACKOFF_CAP_S] * 4


def test_a_long_outage_warns_at_the_first_failure_then_ever_more_rarely() -> None:
    clock = _Clock()
    backoff = loop.Backoff(clock=clock)
    warned = []
    for attempt in range(1, 17):
        clock.now += 0.5
        backoff.failed()
        if backoff.worth_a_warning:
            warned.append(attempt)
    assert warned == [1, 2, 4, 8, 16]


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
