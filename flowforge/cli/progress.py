"""Live progress of a run: redrawn in place on a terminal, one line per change otherwise.

On a terminal the block (a summary line, then a line per task) is rewritten each poll by
moving the cursor up over the previous block. Into a pipe or a file that would be noise,
so each change of the run's or a task's state or attempt becomes one plain line instead:
a CI log then reads as the run's story.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from flowforge.cli import render
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow

#: ANSI: move the cursor to the start of the line N lines up, and clear to the end.
_UP = "\x1b[{n}F"
_CLEAR = "\x1b[J"


def is_terminal(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


class Progress:
    """Shows successive snapshots of one run."""

    def __init__(self, stream: TextIO, *, live: bool | None = None) -> None:
        self.stream = stream
        self.live = is_terminal(stream) if live is None else live
        self._drawn = 0
        self._seen: dict[str, tuple[str, int]] = {}

    def update(self, run: WorkflowRunRow, tasks: Sequence[TaskRunRow]) -> None:
        now = datetime.now(UTC)
        if self.live:
            self._redraw(run, render.task_order(run, tasks), now)
        else:
            self._changes(run, render.task_order(run, tasks), now)
        self.stream.flush()

    def _redraw(self, run: WorkflowRunRow, tasks: Sequence[TaskRunRow], now: datetime) -> None:
        lines = [
            f"run {run.id} {run.workflow_name}: {run.state}  "
            f"{render.span(run.created_at, run.finished_at, now)}  ({render.counts(tasks)})",
            *(
                f"  {line}"
                for line in render.table(render.TASK_HEADERS, render.task_rows(tasks, now))
            ),
        ]
        if self._drawn:
            self.stream.write(_UP.format(n=self._drawn) + _CLEAR)
        self.stream.write("\n".join(lines) + "\n")
        self._drawn = len(lines)

    def _changes(self, run: WorkflowRunRow, tasks: Sequence[TaskRunRow], now: datetime) -> None:
        # The run's line comes before its tasks' while it runs, after them once it ends,
        # so the log reads in cause-and-effect order.
        finished = run.finished_at is not None
        if not finished:
            self._change("(run)", run.state, 0, f"run {run.workflow_name}", "", now)
        for task in tasks:
            detail = ""
            if task.state == "running" and task.lease_owner:
                detail = f" on {task.lease_owner}"
            elif task.state in ("failed", "retrying") and task.error:
                detail = f": {render.error_line(task.error)}"
            suffix = f" (attempt {task.attempt}/{task.max_attempts}){detail}"
            self._change(task.task_key, task.state, task.attempt, task.task_key, suffix, now)
        if finished:
            self._change("(run)", run.state, 0, f"run {run.workflow_name}", "", now)

    def _change(
        self, key: str, state: str, attempt: int, label: str, suffix: str, now: datetime
    ) -> None:
        before = self._seen.get(key)
        if before == (state, attempt):
            return
        self._seen[key] = (state, attempt)
        change = state if before is None else f"{before[0]} -> {state}"
        self.stream.write(f"{render.clock(now)} {label}: {change}{suffix}\n")
