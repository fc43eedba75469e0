"""The fire arithmetic (``flowforge/aggregates/cron.py``): fire times across DST changes
against the cron library's own iteration, the missed-fire policy with a controlled
clock, and the checks of an expression and a time zone. Pure: no database, no sleep."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import cronsim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge import errors
from flowforge.aggregates.cron import MAX_CATCH_UP, Cron, check_catch_up, plan

#: Zones with DST both sides of the equator (Sydney's changes fall in April and
#: October), one with a half-hour change (Lord Howe), and one without DST.
ZONES = (
    "Europe/Paris",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Asia/Tokyo",
)
#: Fields that hit the changes: fixed times in the skipped or repeated hour, ranges
#: over it, steps, and every minute.
MINUTES = ("*", "0", "30", "*/15", "5,35", "59")
HOURS = ("*", "0", "1", "2", "3", "*/2", "1-3", "2,14")
DAYS_OF_WEEK = ("*", "0", "1-5")


@cache
def transitions(zone: str, year: int = 2026) -> list[datetime]:
    """The instants (UTC) the zone's offset changes in ``year``, found hour by hour."""
    tz = ZoneInfo(zone)
    found = []
    at = datetime(year, 1, 1, tzinfo=UTC)
    while at.year == year:
        after = at + timedelta(minutes=30)
        if at.astimezone(tz).utcoffset() != after.astimezone(tz).utcoffset():
            found.append(after)
        at = after
    return found or [datetime(year, 3, 29, 1, tzinfo=UTC)]


@st.composite
def around_a_change(draw: st.DrawFn) -> tuple[Cron, datetime]:
    zone = draw(st.sampled_from(ZONES))
    expression = " ".join(
        [
            draw(st.sampled_from(MINUTES)),
            draw(st.sampled_from(HOURS)),
            "*",
            "*",
            draw(st.sampled_from(DAYS_OF_WEEK)),
        ]
    )
    change = draw(st.sampled_from(transitions(zone)))
    offset = draw(st.integers(-2 * 24 * 3600, 2 * 24 * 3600))
    micro = draw(st.integers(0, 999_999))
    return Cron(expression, zone), change + timedelta(seconds=offset, microseconds=micro)


def library_fires(cron: Cron, start: datetime, count: int) -> list[datetime]:
    """The library's own iteration, from ``start`` in the schedule's zone, in UTC, less
    what it gives at or before the start (started in an autumn change's repeated hour it
    first gives that hour's earlier pass: ``Cron.fire_times_after`` drops it)."""
    iterator = cronsim.CronSim(cron.expression, start.astimezone(ZoneInfo(cron.timezone)))
    fires = (fire.astimezone(UTC) for fire in iterator)
    return list(itertools.islice(itertools.dropwhile(lambda f: f <= start, fires), count))


def test_started_in_the_repeated_hour_the_next_fire_is_never_in_the_past() -> None:
    # 2026-10-25 01:00 UTC is 02:00 CET, the second pass of Paris's 02:00-03:00. The
    # library alone answers 02:59 CEST (00:59 UTC), an hour before the start.
    second_pass = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
    raw = cronsim.CronSim("59 2 * * *", second_pass.astimezone(ZoneInfo("Europe/Paris")))
    assert next(raw).astimezone(UTC) < second_pass  # the quirk this guards against
    cron = Cron("59 2 * * *", "Europe/Paris")
    assert cron.next_fire_after(second_pass) == datetime(2026, 10, 26, 1, 59, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(around_a_change())
def test_fire_times_across_dst_changes_are_the_librarys_strictly_increasing_and_never_repeated(
    case: tuple[Cron, datetime],
) -> None:
    cron, start = case
    expected = library_fires(cron, start, 30)
    fires = []
    at = start
    # One fire at a time, each from the one before, as the scheduler stores them: the
    # chain must be the library's continuous iteration.
    for _ in range(30):
        at = cron.next_fire_after(at)
        fires.append(at)
    assert fires == expected
    assert all(a < b for a, b in itertools.pairwise(fires)), fires
    assert len(set(fires)) == len(fires)
    # A pass a little late (the poll's latency) computes the same next fire time.
    assert [cron.next_fire_after(f + timedelta(milliseconds=300)) for f in fires[:-1]] == fires[1:]


@settings(max_examples=300, deadline=None)
@given(around_a_change(), st.integers(0, 6 * 3600), st.integers(0, 5))
def test_the_fires_of_a_late_pass_are_the_newest_due_ones_of_the_forward_iteration(
    case: tuple[Cron, datetime], late_by: int, catch_up: int
) -> None:
    cron, start = case
    due = cron.next_fire_after(start)
    now = due + timedelta(seconds=late_by)
    forward = [due]
    while (following := cron.next_fire_after(forward[-1])) <= now:
        forward.append(following)
    fires = plan(cron, due, now, catch_up)
    assert [f.fire_at for f in fires] == forward[-(catch_up + 1) :]
    # Each fire names the next one; the last names the first fire time after now.
    assert [f.next_fire_at for f in fires[:-1]] == [f.fire_at for f in fires[1:]]
    assert fires[-1].next_fire_at == following > now


NOON = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
HOURLY = Cron("0 * * * *", "UTC")


def test_nothing_fires_before_the_next_fire_time() -> None:
    assert plan(HOURLY, NOON, NOON - timedelta(microseconds=1), catch_up=3) == []


def test_a_pass_at_or_just_after_the_fire_time_fires_it_and_moves_to_the_next() -> None:
    for now in (NOON, NOON + timedelta(milliseconds=250)):
        (fire,) = plan(HOURLY, NOON, now, catch_up=0)
        assert (fire.fire_at, fire.next_fire_at) == (NOON, NOON + timedelta(hours=1))


def test_after_downtime_the_default_runs_the_latest_missed_fire_once_and_skips_the_rest() -> None:
    now = NOON + timedelta(hours=5, minutes=20)
    (fire,) = plan(HOURLY, NOON, now, catch_up=0)
    assert fire.fire_at == NOON + timedelta(hours=5)
    assert fire.next_fire_at == NOON + timedelta(hours=6)


def test_catch_up_n_runs_the_newest_n_missed_fires_oldest_first_then_the_latest() -> None:
    now = NOON + timedelta(hours=5, minutes=20)
    fires = plan(HOURLY, NOON, now, catch_up=2)
    hours = [NOON + timedelta(hours=h) for h in (3, 4, 5, 6)]
    assert [(f.fire_at, f.next_fire_at) for f in fires] == list(itertools.pairwise(hours))


def test_catch_up_larger_than_the_missed_fires_runs_each_of_them_once() -> None:
    now = NOON + timedelta(hours=2, minutes=1)
    fires = plan(HOURLY, NOON, now, catch_up=50)
    assert [f.fire_at for f in fires] == [NOON + timedelta(hours=h) for h in (0, 1, 2)]


def test_a_year_of_downtime_costs_only_the_fires_it_runs() -> None:
    # Counted back from now: a minute schedule down for a year is not walked minute by
    # minute (that is half a million steps).
    every_minute = Cron("* * * * *", "Europe/Paris")
    now = NOON + timedelta(days=365)
    fires = plan(every_minute, NOON, now, catch_up=1)
    assert [f.fire_at for f in fires] == [now - timedelta(minutes=1), now]


def test_the_paris_spring_gap_fires_once_at_the_first_valid_minute() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist that day.
    paris = Cron("30 2 * * *", "Europe/Paris")
    fires = list(_take(paris.fire_times_after(datetime(2026, 3, 28, 12, tzinfo=UTC)), 3))
    local = [f.astimezone(ZoneInfo("Europe/Paris")).strftime("%d %H:%M %Z") for f in fires]
    assert local == ["29 03:00 CEST", "30 02:30 CEST", "31 02:30 CEST"]


def test_the_paris_autumn_repeat_fires_a_fixed_time_once_and_every_minute_twice() -> None:
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET: 02:30 happens twice.
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    daily = list(_take(Cron("30 2 * * *", "Europe/Paris").fire_times_after(start), 2))
    assert [f.isoformat() for f in daily] == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST, the first of the two
        "2026-10-26T01:30:00+00:00",
    ]
    hourly = Cron("30 * * * *", "Europe/Paris").fire_times_after(
        datetime(2026, 10, 24, 23, 45, tzinfo=UTC)
    )
    assert [f.strftime("%H:%M") for f in _take(hourly, 3)] == ["00:30", "01:30", "02:30"]


@pytest.mark.parametrize(
    ("expression", "timezone", "says"),
    [
        ("61 * * * *", "UTC", "cron expression '61 * * * *': bad minute"),
        ("* * *", "UTC", "expected 5 fields"),
        ("* * * * * * *", "UTC", "got 7"),
        ("0 0 30 2 *", "UTC", "bad day-of-month"),
        ("* * * * *", "Mars/Olympus", "time zone 'Mars/Olympus': not a known IANA time zone"),
        ("* * * * *", "", "time zone '': not a known"),
        ("* * * * *", "../../etc/passwd", "not a known IANA time zone"),
    ],
)
def test_a_bad_expression_or_time_zone_is_refused_in_one_line_naming_it(
    expression: str, timezone: str, says: str
) -> None:
    with pytest.raises(errors.InvalidScheduleError) as raised:
        Cron(expression, timezone)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("nickname", "fields"),
    [("@daily", "0 0 * * *"), ("@hourly", "0 * * * *"), ("@weekly", "0 0 * * 0")],
)
def test_a_nickname_fires_as_the_fields_it_stands_for(nickname: str, fields: str) -> None:
    named, spelled = Cron(nickname, "Europe/Paris"), Cron(fields, "Europe/Paris")
    assert _take(named.fire_times_after(NOON), 5) == _take(spelled.fire_times_after(NOON), 5)
    assert named.expression == nickname  # stored as the user wrote it


def test_six_fields_read_the_first_as_seconds() -> None:
    every_ten = Cron("*/10 * * * * *", "UTC")
    assert [f.second for f in _take(every_ten.fire_times_after(NOON), 3)] == [10, 20, 30]


@pytest.mark.parametrize("bad", [-1, MAX_CATCH_UP + 1, True, 1.5])
def test_catch_up_is_a_whole_number_from_zero_to_its_bound(bad: object) -> None:
    with pytest.raises(errors.InvalidScheduleError, match="catch_up"):
        check_catch_up(bad)  # type: ignore[arg-type]
    assert check_catch_up(0) == 0
    assert check_catch_up(MAX_CATCH_UP) == MAX_CATCH_UP


def _take(iterator: object, count: int) -> list[datetime]:
    it = iter(iterator)  # type: ignore[call-overload]
    return [next(it) for _ in range(count)]
