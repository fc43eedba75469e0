"""Capped, jittered exponential backoff (flowforge/backoff.py): the reconnect waits of
every process and the retries of an outcome's write."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge.backoff import (
    RECONNECT_BACKOFF_BASE_S,
    RECONNECT_BACKOFF_CAP_S,
    RECONNECT_BACKOFF_RESET_AFTER_S,
    Backoff,
    backoff_delay,
)

_BASES = st.floats(0.001, 10.0)
_CAPS = st.floats(0.001, 100.0)
_RANDS = st.floats(0.0, 1.0)


@given(attempt=st.integers(0, 10_000), rand=_RANDS, base=_BASES, cap=_CAPS)
def test_a_wait_is_within_zero_and_the_cap(
    attempt: int, rand: float, base: float, cap: float
) -> None:
    assert 0.0 <= backoff_delay(attempt, rand, base=base, cap=cap) <= cap


@given(attempt=st.integers(0, 10_000), base=_BASES, cap=_CAPS)
def test_the_ceiling_is_the_cap_once_the_doubled_base_reaches_it(
    attempt: int, base: float, cap: float
) -> None:
    ceiling = backoff_delay(attempt, 1.0, base=base, cap=cap)
    if base * 2.0 ** min(attempt, 64) >= cap:
        assert ceiling == cap
    else:
        assert ceiling < cap


@given(attempt=st.integers(0, 10_000), rand=_RANDS, base=_BASES, cap=_CAPS)
def test_a_wait_never_shrinks_from_one_attempt_to_the_next_at_the_same_rand(
    attempt: int, rand: float, base: float, cap: float
) -> None:
    now = backoff_delay(attempt, rand, base=base, cap=cap)
    assert now <= backoff_delay(attempt + 1, rand, base=base, cap=cap)


@given(failures=st.integers(1, 80), rand=_RANDS)
def test_a_backoffs_waits_through_one_outage_grow_to_the_cap_and_stay_there(
    failures: int, rand: float
) -> None:
    backoff = Backoff(base=0.5, cap=8.0, rand=lambda: rand, clock=FakeClock())
    waits = [backoff.next_delay() for _ in range(failures)]
    assert waits == sorted(waits)
    assert all(0.0 <= wait <= 8.0 for wait in waits)
    assert waits[-1] == min(8.0, 0.5 * 2 ** (failures - 1)) * rand


def test_backoff_ceiling_doubles_from_the_base_per_attempt() -> None:
    base = RECONNECT_BACKOFF_BASE_S
    assert 4 * base <= RECONNECT_BACKOFF_CAP_S
    assert [backoff_delay(attempt, 1.0) for attempt in range(3)] == [
        base,
        2 * base,
        4 * base,
    ]


@pytest.mark.parametrize("attempt", [10, 50, 10_000])
def test_backoff_never_exceeds_the_cap(attempt: int) -> None:
    assert backoff_delay(attempt, 1.0) == RECONNECT_BACKOFF_CAP_S


def test_the_cap_lets_a_returning_broker_be_noticed_within_about_a_second() -> None:
    assert RECONNECT_BACKOFF_CAP_S <= 1.0


def test_backoff_is_full_jitter_scaled_by_rand() -> None:
    ceiling = backoff_delay(3, 1.0)
    assert backoff_delay(3, 0.0) == 0.0
    assert backoff_delay(3, 0.25) == pytest.approx(ceiling / 4)


@pytest.mark.parametrize(("attempt", "rand"), [(-1, 0.5), (0, -0.1), (0, 1.5)])
def test_backoff_rejects_a_negative_attempt_or_rand_outside_the_unit_interval(
    attempt: int, rand: float
) -> None:
    with pytest.raises(ValueError, match="must be"):
        backoff_delay(attempt, rand)


def test_a_backoff_grows_from_the_base_to_the_cap_through_an_outage() -> None:
    backoff = Backoff(rand=lambda: 1.0)
    waits = [backoff.next_delay() for _ in range(6)]
    base, cap = RECONNECT_BACKOFF_BASE_S, RECONNECT_BACKOFF_CAP_S
    assert waits == [base, 2 * base, 4 * base, cap, cap, cap]
    assert backoff.failures == 6


def test_a_long_outage_warns_at_the_first_failure_then_ever_more_rarely() -> None:
    backoff = Backoff()
    warned = []
    for attempt in range(1, 17):
        backoff.next_delay()
        if backoff.worth_a_warning:
            warned.append(attempt)
    assert warned == [1, 2, 4, 8, 16]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_grows_with_each_failure_of_one_outage() -> None:
    backoff = Backoff(base=1.0, cap=1000.0, rand=lambda: 1.0, clock=FakeClock())
    assert [backoff.next_delay() for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff.failures == 4


def test_backoff_starts_from_the_base_after_a_connection_stayed_healthy_long_enough() -> None:
    clock = FakeClock()
    backoff = Backoff(rand=lambda: 1.0, clock=clock)
    for _ in range(8):
        backoff.next_delay()
    assert backoff.next_delay() == RECONNECT_BACKOFF_CAP_S
    backoff.connected()
    clock.now += RECONNECT_BACKOFF_RESET_AFTER_S
    backoff.connected()  # later calls do not move the start of the healthy period
    assert backoff.next_delay() == RECONNECT_BACKOFF_BASE_S
    assert backoff.failures == 1


def test_backoff_keeps_growing_when_the_connection_dropped_before_the_healthy_period() -> None:
    clock = FakeClock()
    backoff = Backoff(base=1.0, cap=1000.0, rand=lambda: 1.0, clock=clock)
    for _ in range(3):
        backoff.next_delay()
    backoff.connected()
    clock.now += RECONNECT_BACKOFF_RESET_AFTER_S - 0.001
    assert backoff.next_delay() == 8.0
    # A failure ends the healthy period: time spent failing never counts as healthy.
    clock.now += 2 * RECONNECT_BACKOFF_RESET_AFTER_S
    assert backoff.next_delay() == 16.0


def test_backoff_reset_starts_the_next_outage_from_the_base() -> None:
    backoff = Backoff(rand=lambda: 1.0, clock=FakeClock())
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == RECONNECT_BACKOFF_BASE_S


def test_backoff_takes_its_base_and_cap_and_applies_full_jitter() -> None:
    backoff = Backoff(base=2.0, cap=5.0, rand=lambda: 0.5, clock=FakeClock())
    assert [backoff.next_delay() for _ in range(3)] == [1.0, 2.0, 2.5]
