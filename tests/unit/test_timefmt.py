"""How times and durations are written for people (flowforge/timefmt.py): the strings
the CLI's output and ``why``'s answers show, and the docs quote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from flowforge import timefmt

#: 14:03:04.000123 at UTC+2: written as the UTC time it is.
AT = datetime(2026, 1, 31, 14, 3, 4, 123, tzinfo=timezone(timedelta(hours=2)))


def test_a_time_is_written_in_utc_to_the_microsecond_with_a_z() -> None:
    assert timefmt.iso(AT) == "2026-01-31T12:03:04.000123Z"


def test_a_clock_is_the_utc_time_of_day_with_a_z() -> None:
    assert timefmt.clock(AT) == "12:03:04Z"


def test_a_time_not_known_is_a_dash_or_what_the_caller_writes_instead() -> None:
    assert (timefmt.iso(None), timefmt.clock(None)) == ("-", "-")
    assert (timefmt.iso(None, missing="?"), timefmt.clock(None, missing="?")) == ("?", "?")


def test_a_written_time_reads_back_as_the_same_moment() -> None:
    written = timefmt.iso(AT)
    assert datetime.fromisoformat(written.replace("Z", "+00:00")) == AT


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (None, "-"),
        (0.0, "0.00s"),
        (0.5, "0.50s"),
        (9.5, "9.50s"),
        (12.34, "12.3s"),
        (59.9, "59.9s"),
        (60.0, "1m00s"),
        (61.7, "1m01s"),
        (3599.0, "59m59s"),
        (3600.0, "1h00m"),
        (3600.0 + 2 * 60 + 59, "1h02m"),
        (26 * 3600.0, "26h00m"),
    ],
)
def test_a_duration_is_written_in_the_units_that_fit(seconds: float | None, written: str) -> None:
    assert timefmt.duration(seconds) == written


def test_a_span_runs_to_its_end_or_while_it_lasts_to_now() -> None:
    start = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    now = start + timedelta(minutes=5)
    assert timefmt.span(start, start + timedelta(seconds=3), now) == "3.00s"
    assert timefmt.span(start, None, now) == "5m00s"
    assert timefmt.span(None, None, now) == "-"


def test_why_s_relative_times_are_in_tenths_of_a_second() -> None:
    start = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    later = start + timedelta(seconds=3.04)
    assert timefmt.between(start, later) == "3.0s"
    assert timefmt.ago(start, later) == "3.0s ago"
    assert timefmt.until(later, start) == "in 3.0s"
    assert timefmt.between(start, None, missing="") == ""
    assert (timefmt.ago(None, later), timefmt.until(None, later, missing="?")) == ("-", "?")
