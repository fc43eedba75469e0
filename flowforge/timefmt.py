"""How times and durations are written for people: the CLI's tables and lines, and the
answers of ``why``.

Times are UTC, written ``2026-01-31T12:03:04.123456Z``: the form ``why --at`` reads back,
so a time can be copied from any output into a question about that moment. A time that
is not known is written ``missing``: ``-`` in a table cell, ``?`` in a sentence.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(at: datetime | None, missing: str = "-") -> str:
    if at is None:
        return missing
    # Microseconds: the log's own precision, so a time pasted into `why --at` answers
    # as of that transition, not as of just before it.
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def clock(at: datetime | None, missing: str = "-") -> str:
    """Just the time of day, for headlines; ``iso`` in details."""
    return missing if at is None else at.astimezone(UTC).strftime("%H:%M:%SZ")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    # A clock a little behind the database's (a span from the database's time to this
    # machine's now) printed -0.00s: a duration is never negative.
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def span(start: datetime | None, end: datetime | None, now: datetime) -> str:
    """How long from ``start`` to ``end`` (or to ``now``, while it lasts)."""
    if start is None:
        return "-"
    return duration(((end or now) - start).total_seconds())


def between(start: datetime | None, end: datetime | None, missing: str = "-") -> str:
    """The seconds from ``start`` to ``end``, to a tenth: ``3.0s``."""
    if start is None or end is None:
        return missing
    return f"{(end - start).total_seconds():.1f}s"


def ago(then: datetime | None, now: datetime, missing: str = "-") -> str:
    """How long before ``now`` ``then`` was: ``3.0s ago``."""
    return missing if then is None else f"{(now - then).total_seconds():.1f}s ago"


def until(then: datetime | None, now: datetime, missing: str = "-") -> str:
    """How long after ``now`` ``then`` comes: ``in 3.0s``."""
    return missing if then is None else f"in {(then - now).total_seconds():.1f}s"


#: What an ISO 8601 time looks like, for the messages that refuse one.
ISO_EXAMPLE = "2026-01-31T12:03:04Z"


def parse_iso(text: str) -> datetime:
    """An ISO 8601 time a person typed; without an offset it is UTC, as every time
    FlowForge prints is. ``ValueError`` if it is none (the caller names where it was)."""
    at = datetime.fromisoformat(text)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at
