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


def test_a_backoff_grows_from_the_base_to_the_cap_through_an_outage() -> None:
    backoff = loop.Backoff(rand=lambda: 1.0)
    waits = [backoff.next_delay() for _ in range(6)]
    base, cap = loop.RECONNECT_BACKOFF_BASE_S, loop.RECONNECT_BACKOFF_CAP_S
    assert waits == [base, 2 * base, 4 * base, cap, cap, cap]
    assert backoff.failures == 6


def test_a_long_outage_warns_at_the_first_failure_then_ever_more_rarely() -> None:
    backoff = loop.Backoff()
    warned = []
    for attempt in range(1, 17):
        backoff.next_delay()
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_grows_with_each_failure_of_one_outage() -> None:
    backoff = loop.Backoff(base=1.0, cap=1000.0, rand=lambda: 1.0, clock=FakeClock())
    assert [backoff.next_delay() for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff.failures == 4


def test_backoff_starts_from_the_base_after_a_connection_stayed_healthy_long_enough() -> None:
    clock = FakeClock()
    backoff = loop.Backoff(rand=lambda: 1.0, clock=clock)
    for _ in range(8):
        backoff.next_delay()
    assert backoff.next_delay() == loop.RECONNECT_BACKOFF_CAP_S
    backoff.connected()
    clock.now += loop.RECONNECT_BACKOFF_RESET_AFTER_S
    backoff.connected()  # later calls do not move the start of the healthy period
    assert backoff.next_delay() == loop.RECONNECT_BACKOFF_BASE_S
    assert backoff.failures == 1


def test_backoff_keeps_growing_when_the_connection_dropped_before_the_healthy_period() -> None:
    clock = FakeClock()
    backoff = loop.Backoff(base=1.0, cap=1000.0, rand=lambda: 1.0, clock=clock)
    for _ in range(3):
        backoff.next_delay()
    backoff.connected()
    clock.now += loop.RECONNECT_BACKOFF_RESET_AFTER_S - 0.001
    assert backoff.next_delay() == 8.0
    # A failure ends the healthy period: time spent failing never counts as healthy.
    clock.now += 2 * loop.RECONNECT_BACKOFF_RESET_AFTER_S
    assert backoff.next_delay() == 16.0


def test_backoff_reset_starts_the_next_outage_from_the_base() -> None:
    backoff = loop.Backoff(rand=lambda: 1.0, clock=FakeClock())
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == loop.RECONNECT_BACKOFF_BASE_S


def test_backoff_takes_its_base_and_cap_and_applies_full_jitter() -> None:
    backoff = loop.Backoff(base=2.0, cap=5.0, rand=lambda: 0.5, clock=FakeClock())
    assert [backoff.next_delay() for _ in range(3)] == [1.0, 2.0, 2.5]
