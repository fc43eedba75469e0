"""A cron schedule's fire times: the arithmetic, done by a cron library, with ``now`` given.

``cronsim`` (the library healthchecks.io runs on) iterates an expression in a time zone
(``zoneinfo``), DST included, the way Debian's cron does: a fire time that a spring-
forward gap skips fires once at the first valid minute after the gap; a fire time that
an autumn fall-back repeats fires once (the first of the two), while an expression of
every minute or every hour fires through both hours. FlowForge does not redo any of it:
every fire time here is one the library produced, turned into UTC for the tables.

Which fire times a pass fires (:func:`plan`) is decided against a ``now`` that the
caller passes in (the database's clock in production, any instant in a test):

- the fire times that fell due (``next_fire_at`` and every later one up to ``now``):
  the newest always fires: in normal operation it is the one that just came due, a few
  milliseconds late. The older ones were *missed* (no scheduler ran then): the newest
  ``catch_up`` of them fire too, oldest first, and the rest are skipped (default 0:
  after downtime the schedule runs once, for its latest fire time, as Airflow does with
  ``catchup=False`` and Kubernetes does for a CronJob);
- the schedule's next fire time after that is the first one after ``now``: never a
  burst of old fires on a later pass.

Pure: no I/O; ``now`` is always a parameter.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import cronsim

from flowforge import errors

#: At most this many missed fire times may be caught up by one schedule (``--catch-up``).
MAX_CATCH_UP = 1000
#: The longest a valid expression may go without a fire time: an expression that names a
#: day no month has (``0 0 30 2 *``) never fires, and the library would search forever.
_HORIZON = timedelta(days=5 * 366)
#: How far back from now ``due_fire_times`` looks first.
_FIRST_WINDOW = timedelta(hours=1)
#: The nicknames of Vixie cron and Airflow, as the five fields they stand for.
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True, slots=True)
class Cron:
    """A validated cron expression in a time zone (an IANA name, e.g. Europe/Paris).

    Five fields (minute hour day-of-month month day-of-week), six with a leading
    seconds field, or a nickname (``@daily``: :data:`NICKNAMES`). ``InvalidScheduleError``
    names what is wrong with the expression or the zone."""

    expression: str
    timezone: str

    def __post_init__(self) -> None:
        zone = _zone(self.timezone)
        if self.expression.startswith("@") and self.expression not in NICKNAMES:
            raise errors.InvalidScheduleError(
                f"cron expression {self.expression!r}: not a nickname; use one of "
                f"{', '.join(NICKNAMES)}, or five fields"
            )
        fields = self.fields.split()
        if len(fields) not in (5, 6):
            raise errors.InvalidScheduleError(
                f"cron expression {self.expression!r}: expected 5 fields (minute hour "
                f"day-of-month month day-of-week), or 6 with a leading seconds field; "
                f"got {len(fields)}"
            )
        try:
            first = next(cronsim.CronSim(self.fields, datetime.now(zone)))
        except (cronsim.CronSimError, ValueError, StopIteration) as exc:
            raise errors.InvalidScheduleError(
                f"cron expression {self.expression!r}: {_reason(exc)}"
            ) from None
        if first - datetime.now(zone) > _HORIZON:
            raise errors.InvalidScheduleError(
                f"cron expression {self.expression!r} never fires within five years"
            )

    @property
    def fields(self) -> str:
        """The expression as the library reads it: a nickname as its five fields."""
        return NICKNAMES.get(self.expression, self.expression)

    @property
    def zone(self) -> ZoneInfo:
        return _zone(self.timezone)

    def fire_times_after(self, after: datetime) -> Iterator[datetime]:
        """The fire times strictly after ``after`` (aware), in order, in UTC.

        The library's, less any it gives at or before the last one: started inside an
        autumn change's repeated hour (02:00 CET, the second time round), it gives the
        fire time of that hour's first pass (02:59 CEST), which is in the past. Taken
        as it came, a scheduler would fire that time again and again until the hour
        ends (the property test found it)."""
        local = after.astimezone(self.zone)
        last = after
        for fire in cronsim.CronSim(self.fields, local):
            if (utc := fire.astimezone(UTC)) > last:
                last = utc
                yield utc

    def next_fire_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after``, in UTC."""
        return next(self.fire_times_after(after))

    def due_fire_times(self, due: datetime, now: datetime, newest: int) -> list[datetime]:
        """The newest ``newest`` fire times from ``due`` (a fire time) to ``now``, both
        included, oldest first.

        Found forwards from a point before ``now`` that moves back (doubling) until it
        holds enough of them or reaches ``due``: a schedule down for a year costs about
        as many steps as it fires, not one per missed minute. Not by the library's
        reverse iteration, which disagrees with its forward one across an autumn
        change (the property test found it)."""
        due = due.astimezone(UTC)  # a row's time comes in the session's time zone
        window = _FIRST_WINDOW
        while True:
            start = now - window
            if start <= due:
                fires = [due, *self._until(now, self.fire_times_after(due))]
                return fires[-newest:] if due <= now else []
            fires = list(self._until(now, self.fire_times_after(start)))
            if len(fires) >= newest:
                return fires[-newest:]
            window *= 2

    @staticmethod
    def _until(now: datetime, fires: Iterator[datetime]) -> Iterator[datetime]:
        return itertools.takewhile(lambda fire: fire <= now, fires)


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire a pass makes: its nominal time, and the schedule's next fire time after
    it (the next one this pass fires, or the first after ``now``)."""

    fire_at: datetime
    next_fire_at: datetime


def plan(cron: Cron, due: datetime, now: datetime, catch_up: int) -> list[Fire]:
    """The fires a pass at ``now`` makes for a schedule whose next fire time is ``due``
    (the module says which); none while ``due`` is after ``now``."""
    chosen = cron.due_fire_times(due, now, catch_up + 1)
    if not chosen:
        return []
    nexts = [*chosen[1:], cron.next_fire_after(now)]
    return [Fire(fire, following) for fire, following in zip(chosen, nexts, strict=True)]


def check_catch_up(catch_up: int) -> int:
    if isinstance(catch_up, bool) or not isinstance(catch_up, int):
        raise errors.InvalidScheduleError(f"catch_up must be a whole number, got {catch_up!r}")
    if not 0 <= catch_up <= MAX_CATCH_UP:
        raise errors.InvalidScheduleError(
            f"catch_up must be from 0 to {MAX_CATCH_UP} missed fires, got {catch_up}"
        )
    return catch_up


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise errors.InvalidScheduleError(
            f"time zone {name!r}: not a known IANA time zone; use a name such as "
            f"UTC, Europe/Paris or America/New_York"
        ) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, StopIteration):
        return "it never fires"
    text = str(exc).strip() or type(exc).__name__
    return text[0].lower() + text[1:]
