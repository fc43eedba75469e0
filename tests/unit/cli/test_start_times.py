"""``flowforge submit --at TIME`` / ``--in DURATION``: what they accept and refuse."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta, timezone

import pytest

from flowforge.cli import start_times


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1.5s", 1.5),
        ("0s", 0),
        (" 2H ", 7200),
        ("365d", 365 * 86400),
    ],
)
def test_a_duration_is_number_unit_parts(text: str, seconds: float) -> None:
    assert start_times.delay(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("10", "not a duration; write e.g. 90s, 10m, 2h or 1h30m"),
        ("soon", "not a duration"),
        ("-5m", "not a duration"),
        ("5 m", "not a duration"),
        ("", "not a duration"),
        ("366d", "must be at most 365 days"),
    ],
)
def test_a_bad_duration_is_one_clear_error(text: str, problem: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=problem):
        start_times.delay(text)


def test_a_time_with_an_offset_or_z_is_taken_as_it_is() -> None:
    assert start_times.start_time("2026-01-31T12:03:00Z") == datetime(
        2026, 1, 31, 12, 3, tzinfo=UTC
    )
    plus_one = start_times.start_time("2026-01-31T13:03:00+01:00")
    assert plus_one.utcoffset() == timedelta(hours=1)
    assert plus_one == datetime(2026, 1, 31, 12, 3, tzinfo=UTC)


def test_a_time_without_an_offset_is_this_machines_local_time() -> None:
    naive = datetime(2026, 1, 31, 12, 3)
    at = start_times.start_time("2026-01-31T12:03")
    assert at.tzinfo is not None
    assert at == naive.astimezone()  # the local zone, whatever it is here
    assert at.replace(tzinfo=None) == naive


def test_a_time_that_is_not_iso_8601_is_one_clear_error() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not an ISO 8601 time"):
        start_times.start_time("tomorrow noon")


def test_a_naive_time_follows_the_time_zone_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    time = pytest.importorskip("time")
    if not hasattr(time, "tzset"):
        pytest.skip("no tzset on this platform")
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        at = start_times.start_time("2026-01-31T21:00")
    finally:
        monkeypatch.undo()
        time.tzset()
    assert at == datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    assert at.utcoffset() == timezone(timedelta(hours=9)).utcoffset(None)
