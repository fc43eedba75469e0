"""The delayed start's pure rules: which start time a run records, and the state its
tasks are created in (properties over generated times and delays)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge.aggregates import start_time
from flowforge.aggregates.definition import MAX_SECONDS
from flowforge.aggregates.states import TaskRunState

NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
delays = st.timedeltas(min_value=timedelta(days=-30), max_value=start_time.MAX_DELAY)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
aware_times = st.builds(lambda delay, zone: (NOW + delay).astimezone(zone), delays, offsets)


@given(delays)
def test_a_delay_counts_from_the_databases_now_and_only_a_positive_one_delays(
    delay: timedelta,
) -> None:
    recorded = start_time.start_time(delay, NOW)
    assert recorded == (NOW + delay if delay > timedelta(0) else None)


@given(aware_times)
def test_a_time_is_recorded_as_given_when_it_is_later_than_now_else_not_at_all(
    at: datetime,
) -> None:
    recorded = start_time.start_time(at, NOW)
    if at > NOW:
        assert recorded == at
        assert recorded.utcoffset() == at.utcoffset()
    else:
        assert recorded is None


@given(st.one_of(st.none(), delays, aware_times), st.integers(0, 5))
def test_a_recorded_start_time_is_later_than_now_and_holds_every_task_pending(
    asked: start_time.StartAt, dependencies: int
) -> None:
    recorded = start_time.start_time(asked, NOW)
    state = start_time.initial_state(dependencies, recorded)
    if recorded is None:
        assert state is (TaskRunState.READY if dependencies == 0 else TaskRunState.PENDING)
        assert not start_time.waits(recorded, NOW)
    else:
        assert recorded > NOW
        assert state is TaskRunState.PENDING
        assert start_time.waits(recorded, NOW)
        assert not start_time.waits(recorded, recorded)  # due at its start time exactly


def test_a_naive_time_a_delay_past_a_year_and_a_wrong_type_are_refused() -> None:
    with pytest.raises(ValueError, match="must be timezone-aware"):
        start_time.checked(datetime(2026, 1, 31, 12, 0))
    with pytest.raises(ValueError, match="at most 365 days"):
        start_time.checked(start_time.MAX_DELAY + timedelta(microseconds=1))
    with pytest.raises(TypeError, match="start_at is a datetime"):
        start_time.checked(60)  # type: ignore[arg-type]
    assert start_time.checked(start_time.MAX_DELAY) == start_time.MAX_DELAY
    assert start_time.checked(NOW) == NOW
    assert start_time.checked(None) is None


def test_the_longest_delay_is_the_definitions_longest_duration() -> None:
    assert start_time.MAX_DELAY.total_seconds() == MAX_SECONDS


def test_a_negative_dependency_count_is_still_refused() -> None:
    with pytest.raises(ValueError, match="dependency_count"):
        start_time.initial_state(-1, NOW)
