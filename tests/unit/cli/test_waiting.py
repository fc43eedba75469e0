"""The progress line that says what a still run waits for: which task it asks `why`
about, when (only once the run has stood still, and then seldom), and how the live and
the plain displays show it."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from uuid import UUID

from flowforge.app.results import TaskRunView
from flowforge.app.why import Explanation
from flowforge.cli.progress import Progress
from flowforge.cli.waiting import QUIET_S, REFRESH_S, Wait, Waiting, held_up_by
from tests.unit.cli.test_progress import ANSI, NOW, run, screen, snapshot_1, task

#: What `why` says of a task whose dispatch no worker has taken (its headline's shape).
HEADLINE = (
    "extract is ready; its dispatch was published at 12:03:04Z (3.0s ago) and no worker "
    "has claimed it yet"
)


def explanation(task_key: str = "extract", reason: str = "dispatch_published") -> Explanation:
    return Explanation(
        task_run_id=UUID(int=9),
        workflow_run_id=UUID(int=1),
        task_key=task_key,
        state="ready",
        reason=reason,
        headline=HEADLINE if task_key == "extract" else f"{task_key} waits",
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Explainer:
    """Counts the explanations asked for (each reads a run's audit log)."""

    def __init__(self) -> None:
        self.asked: list[UUID] = []

    def __call__(self, task_run_id: UUID) -> Explanation:
        self.asked.append(task_run_id)
        return explanation()


def still() -> list[TaskRunView]:
    return [task("extract", "ready"), task("load", "pending", depends_on=["extract"])]


def test_nothing_is_worked_out_until_the_run_stands_still_and_then_seldom() -> None:
    clock, explainer = Clock(), Explainer()
    waiting = Waiting(explainer, clock=clock)
    assert waiting.update(run(), still()) is None
    clock.now += QUIET_S / 2
    assert waiting.update(run(), still()) is None
    assert explainer.asked == []
    clock.now += QUIET_S
    wait = waiting.update(run(), still())
    assert wait == Wait(("extract", "dispatch_published"), f"waiting: {HEADLINE}")
    assert explainer.asked == [still()[0].id]
    clock.now += REFRESH_S / 2
    assert waiting.update(run(), still()) == wait
    assert len(explainer.asked) == 1  # every poll between refreshes reuses it
    clock.now += REFRESH_S
    assert waiting.update(run(), still()) == wait
    assert len(explainer.asked) == 2


def test_a_change_ends_the_wait_at_once() -> None:
    clock, explainer = Clock(), Explainer()
    waiting = Waiting(explainer, clock=clock)
    waiting.update(run(), still())
    clock.now += QUIET_S * 2
    assert waiting.update(run(), still()) is not None
    moved = [task("extract", "running", lease_expires_at=NOW + timedelta(hours=1)), still()[1]]
    assert waiting.update(run(), moved) is None


def test_a_task_running_on_a_live_lease_means_the_run_is_busy_not_waiting() -> None:
    live = NOW + timedelta(hours=1)
    assert (
        held_up_by([task("a", "running", lease_expires_at=live), task("b", "ready")], NOW) is None
    )
    expired = task("a", "running", lease_expires_at=NOW - timedelta(seconds=1))
    assert held_up_by([task("b", "pending"), expired], NOW) == expired
    retrying, ready = task("c", "retrying"), task("d", "ready")
    assert held_up_by([task("b", "pending"), retrying, ready], NOW) == ready
    assert held_up_by([task("b", "pending"), retrying], NOW) == retrying
    assert held_up_by([task("e", "succeeded")], NOW) is None


def test_the_live_block_ends_with_the_wait_cut_to_the_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out, live=True, width=60, color=False)
    progress.update(run(), snapshot_1(), Wait(("extract", "r"), f"waiting: {HEADLINE}"))
    shown = screen(out.getvalue(), 60)
    assert shown[-1].startswith("waiting: extract is ready; its dispatch was")
    assert shown[-1].endswith("…") and len(shown[-1]) == 60
    progress.update(run(), snapshot_1(), None)  # the wait ended: its line goes
    assert not any("waiting" in row for row in screen(out.getvalue(), 60))


def test_into_a_pipe_a_wait_is_one_line_each_time_it_changes() -> None:
    out = io.StringIO()
    progress = Progress(out, live=False)
    first = Wait(("extract", "dispatch_published"), f"waiting: {HEADLINE}")
    later = Wait(first.key, first.text.replace("3.0s ago", "5.0s ago"))
    other = Wait(("load", "retry_backoff"), "waiting: load is in retry backoff")
    for wait in (None, first, later, first, other, None, other):
        progress.update(run(), still(), wait)
    lines = [line for line in ANSI.sub("", out.getvalue()).splitlines() if "waiting:" in line]
    assert [re.sub(r"^\d\d:\d\d:\d\dZ ", "", line) for line in lines] == [
        first.text,
        other.text,
        other.text,  # it ended and came back: news again
    ]
