"""A run's timeline (Gantt) as a picture: one row per task, one bar per attempt, its
waits between them, under a time axis in UTC (pure).

A bar runs from an attempt's claim to the transition that ended it (a finish, a
time-out, or the reaper's: a worker lost); a thin line before it is the task waiting to
be claimed (``ready``) or a retry's back-off (``retrying``). At most :data:`ROWS` tasks
are drawn, in the order they were first claimed; the page says how many there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from flowforge import timefmt
from flowforge.ui.replay import TimelineBar, Wait

ROWS = 200
WIDTH = 900
ROW = 18
#: The width of the task names left of the bars, and the axis's height above them.
LABELS = 200
AXIS = 28
#: At most this many ticks on the axis.
TICKS = 8
#: The axis's steps, in seconds: the smallest that keeps at most ``TICKS`` ticks is used.
STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
    3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    label: str


def ticks(start: datetime, end: datetime, width: float = WIDTH) -> list[Tick]:
    """The axis's ticks between ``start`` and ``end``: round times (in UTC), labelled
    with the time of day to the step's precision (``12:03:04``, ``12:03:04.250``)."""
    span = max((end - start).total_seconds(), 1e-3)
    step = next((s for s in STEPS if span / s <= TICKS), STEPS[-1])
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    first = -(-(start - epoch).total_seconds() // step) * step
    found: list[Tick] = []
    t = first
    while t <= (end - epoch).total_seconds() + 1e-9:
        moment = epoch + timedelta(seconds=t)
        label = moment.strftime("%H:%M:%S")
        if step < 1:
            label += f".{moment.microsecond // 1000:03d}"
        if step >= 86400 or (not found and moment.date() != start.date()):
            label = moment.strftime("%Y-%m-%d ") + label
        found.append(Tick(round(width * (moment - start).total_seconds() / span, 1), label))
        t += step
    return found


@dataclass(frozen=True, slots=True)
class Bar:
    attempt: TimelineBar
    x: float
    w: float
    state: str
    duration: str
    error: str


@dataclass(frozen=True, slots=True)
class WaitMark:
    wait: Wait
    x: float
    w: float


@dataclass(slots=True)
class Line:
    """One task's row: its attempts' bars and its waits."""

    key: str
    y: int
    bars: list[Bar] = field(default_factory=list)
    waits: list[WaitMark] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Timeline:
    lines: list[Line]
    ticks: list[Tick]
    #: How many tasks had an attempt, and how many attempts (all, not only those drawn).
    tasks: int
    attempts: int
    start: str
    end: str
    width: int = WIDTH
    labels: int = LABELS
    axis: int = AXIS

    @property
    def height(self) -> int:
        return AXIS + max(1, len(self.lines)) * ROW


def draw(
    attempts: Sequence[TimelineBar],
    waits: Sequence[Wait],
    start: datetime,
    end: datetime,
    *,
    rows: int = ROWS,
) -> Timeline:
    """What ``run.html`` draws: the rows (a task each: its bars and waits), the ticks."""
    span = max((end - start).total_seconds(), 1e-3)

    def x(t: datetime) -> float:
        return round(WIDTH * (min(max(t, start), end) - start).total_seconds() / span, 1)

    lines: dict[str, Line] = {}
    tasks: set[str] = set()
    for a in attempts:
        tasks.add(a.task_key)
        if a.task_key not in lines and len(lines) < rows:
            lines[a.task_key] = Line(a.task_key, AXIS + len(lines) * ROW)
        line = lines.get(a.task_key)
        if line is None:
            continue
        error = a.error or {}
        line.bars.append(
            Bar(
                attempt=a,
                x=x(a.start),
                w=max(2.0, round(x(a.end or end) - x(a.start), 1)),
                state=a.outcome or "running",
                duration=timefmt.between(a.start, a.end, missing="running"),
                error=f"{error.get('type', '')}: {error.get('message', '')}" if error else "",
            )
        )
    for w in waits:
        if (line := lines.get(w.task_key)) is not None:
            line.waits.append(WaitMark(w, x(w.start), max(0.0, x(w.end or end) - x(w.start))))
    return Timeline(
        lines=list(lines.values()),
        ticks=ticks(start, end),
        tasks=len(tasks),
        attempts=len(attempts),
        start=timefmt.iso(start),
        end=timefmt.iso(end),
    )
