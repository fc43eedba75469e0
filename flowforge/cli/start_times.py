"""``flowforge submit --at TIME`` and ``--in DURATION``: a delayed run's start, as typed.

``--at`` is an ISO 8601 time; one without an offset (or ``Z``) is the local time of the
machine running the command, as a person typing a time means it (unlike ``why --at``,
which reads back the UTC times the CLI prints). ``--in`` is a delay such as ``90s``,
``10m``, ``2h`` or ``1h30m``, counted from the DATABASE's clock when the run is created
(``flowforge.aggregates.start_time``), not this machine's. Either way the run waits by
the database's clock; a time already past starts it at once.
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta

from flowforge.aggregates.start_time import MAX_DELAY

#: Seconds in each unit of a duration.
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = r"(\d+(?:\.\d+)?)([dhms])"
_DURATION = re.compile(rf"(?:{_PART})+")


def start_time(text: str) -> datetime:
    """``--at``: an aware time (a naive one in this machine's local time zone)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time; write e.g. 2026-01-31T12:03:00Z, "
            f"2026-01-31T13:03:00+01:00, or 2026-01-31T12:03 (this machine's local time)"
        ) from None
    return at.astimezone() if at.tzinfo is None else at


def delay(text: str) -> timedelta:
    """``--in``: a duration of one or more NUMBER+UNIT parts (d, h, m, s)."""
    compact = text.strip().lower()
    if not _DURATION.fullmatch(compact):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; write e.g. 90s, 10m, 2h or 1h30m"
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in re.findall(_PART, compact))
    if seconds > MAX_DELAY.total_seconds():
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DELAY.days} days, got {text}")
    return timedelta(seconds=seconds)
