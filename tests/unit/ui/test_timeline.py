"""The timeline's rows, bars, waits and time axis (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flowforge.ui import timeline
from flowforge.ui.replay import TimelineBar, Wait

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_each_task_is_a_row_with_a_bar_per_attempt_and_its_waits() -> None:
    error = {"type": "ValueError", "message": "boom"}
    attempts = [
        TimelineBar("a", 1, at(1), at(2), "failed", "w1", error),
        TimelineBar("b", 1, at(1.5), None, None, "w2"),
        TimelineBar("a", 2, at(5), at(9), "succeeded", "w1"),
    ]
    waits = [Wait("a", "ready", at(0), at(1)), Wait("a", "retrying", at(2), at(5))]
    drawn = timeline.draw(attempts, waits, at(0), at(10))
    a, b = drawn.lines
    assert (a.key, b.key) == ("a", "b") and b.y > a.y >= timeline.AXIS
    assert [bar.x for bar in a.bars] == [90.0, 450.0]  # 900 px for 10 s
    assert [bar.w for bar in a.bars] == [90.0, 360.0]
    assert a.bars[0].error == "ValueError: boom" and a.bars[0].state == "failed"
    assert [(w.wait.kind, w.x, w.w) for w in a.waits] == [("ready", 0, 90), ("retrying", 180, 270)]
    assert b.bars[0].state == "running" and b.bars[0].w == 900 - 135  # until the end shown
    assert (drawn.tasks, drawn.attempts) == (2, 3)


def test_at_most_rows_tasks_are_drawn_and_all_are_counted() -> None:
    attempts = [TimelineBar(f"t{i}", 1, at(i), at(i + 1), "succeeded", None) for i in range(5)]
    drawn = timeline.draw(attempts, [], at(0), at(5), rows=3)
    assert [line.key for line in drawn.lines] == ["t0", "t1", "t2"]
    assert (drawn.tasks, drawn.attempts) == (5, 5)


def test_the_axis_ticks_round_times_in_utc() -> None:
    ticks = timeline.ticks(at(0.2), at(10))
    assert [t.label for t in ticks] == [
        "12:00:02", "12:00:04", "12:00:06", "12:00:08", "12:00:10",
    ]  # fmt: skip
    assert ticks[-1].x == timeline.WIDTH
    short = timeline.ticks(at(0), at(0.05))
    assert short[0].label == "12:00:00.000" and short[1].label == "12:00:00.010"
    assert len(timeline.ticks(at(0), at(86400 * 3))) <= timeline.TICKS
    assert all(0 <= t.x <= timeline.WIDTH for t in timeline.ticks(at(7), at(7 + 3600 * 5)))
