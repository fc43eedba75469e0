"""Live progress of a run: redrawn in place on a terminal, one line per change otherwise.

On a terminal the block (a summary line, then a line per task) is rewritten each poll by
moving the cursor up over the previous block. Every line is cut to the terminal's width
(a long error ends in "…"), because a line that wraps takes two rows and the next redraw
would move up too few, leaving stale lines behind. States are coloured on a terminal,
unless ``NO_COLOR`` is set (https://no-color.org) or ``TERM=dumb``. ``rich`` measures
text in terminal cells, so wide characters are cut correctly too.

Into a pipe or a file a redraw would be noise, so each change of the run's or a task's
state or attempt becomes one plain line instead: a CI log then reads as the run's story.

While the run stands still, both say what it waits for (``flowforge/cli/waiting.py``):
the live block in a last line, redrawn with the rest; the plain log in one line each
time the task or the reason it waits for changes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TextIO

from rich.console import Console
from rich.text import Text

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.cli import mapped_lines, render
from flowforge.cli.waiting import Wait

#: ANSI: move the cursor to the start of the line N lines up, and clear to the end.
_UP = "\x1b[{n}F"
_CLEAR = "\x1b[J"

#: Each state's colour, one hue per kind of news: done, broken, busy, waiting.
STATE_STYLES = {
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "running": "cyan",
    "retrying": "yellow",
    "ready": "blue",
    "pending": "dim",
}
#: The waiting line's colour: news of a wait, like a retrying task's.
WAIT_STYLE = "yellow"


def is_terminal(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


class Progress:
    """Shows successive snapshots of one run.

    ``live``, ``width`` and ``color`` default to what the stream is (a terminal, its
    width, colour unless ``NO_COLOR``); tests pass them to render as a terminal would.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool | None = None,
        width: int | None = None,
        color: bool | None = None,
    ) -> None:
        self.stream = stream
        self.live = is_terminal(stream) if live is None else live
        if color is None:
            color = self.live and is_terminal(stream) and not os.environ.get("NO_COLOR")
        # color_system=None: no escape codes at all (rich's own NO_COLOR keeps bold).
        self.console = Console(
            file=stream,
            width=width,
            force_terminal=self.live,
            color_system="standard" if color else None,
            highlight=False,
            emoji=False,
            markup=False,
        )
        self._drawn_lengths: list[int] = []
        self._seen: dict[str, tuple[str, int]] = {}
        self._wait_key: tuple[str, str] | None = None

    def update(
        self, run: WorkflowRunView, tasks: Sequence[TaskRunView], wait: Wait | None = None
    ) -> None:
        """Show a snapshot; ``wait``: what the run stands still for, if it does."""
        now = datetime.now(UTC)
        if self.live:
            lines = block(run, render.task_order(run, tasks), now)
            if wait is not None:
                lines.append(Text(wait.text, WAIT_STYLE))
            self._redraw(lines)
        else:
            plain, groups = mapped_lines.split(render.task_order(run, tasks))
            self._changes(run, plain, now, groups)
            self._waiting(wait, now)
        self.stream.flush()

    def _waiting(self, wait: Wait | None, now: datetime) -> None:
        # Printed when what is waited for changes; not again while the same task waits
        # for the same reason, though the times in its sentence move on.
        key = None if wait is None else wait.key
        if wait is not None and key != self._wait_key:
            self.stream.write(f"{timefmt.clock(now)} {wait.text}\n")
        self._wait_key = key

    def _redraw(self, lines: list[Text]) -> None:
        width = self.console.width
        if self._drawn_lengths:
            # Rows, not lines: if the terminal narrowed since, an old line now wraps.
            rows = sum(max(1, -(-length // width)) for length in self._drawn_lengths)
            self.stream.write(_UP.format(n=rows) + _CLEAR)
        fitted = [fit(line, width) for line in lines]
        for line in fitted:
            self.console.print(line, no_wrap=True, overflow="ellipsis", crop=True)
        self._drawn_lengths = [line.cell_len for line in fitted]

    def _changes(
        self,
        run: WorkflowRunView,
        tasks: Sequence[TaskRunView],
        now: datetime,
        groups: Mapping[str, Sequence[TaskRunView]],
        *,
        run_line: bool = True,
    ) -> None:
        # The run's line comes before its tasks' while it runs, after them once it ends,
        # so the log reads in cause-and-effect order. A mapped task's elements make one
        # line each time the set of their states changes (not one per element), and
        # an element that fails a line of its own. Each change stamped with its row's
        # time (the database's, when it changed), not when this process saw it:
        # `status --watch` of a run that ended an hour ago says when each of its tasks
        # ended (issue #49).
        finished = run.finished_at is not None and run_line
        if not finished and run_line:
            self._change("(run)", run.state, 0, f"run {run.workflow_name}", "", run.updated_at)
        for task in tasks:
            detail = ""
            if task.state == "running" and task.lease_owner:
                detail = f" on {task.lease_owner}"
            elif task.state in ("failed", "retrying") and task.error:
                detail = f": {render.error_line(task.error)}"
            suffix = f" (attempt {task.attempt}/{task.max_attempts}){detail}"
            at = task.updated_at
            self._change(task.task_key, task.state, task.attempt, task.task_key, suffix, at)
        for key, elements in groups.items():
            present = ",".join(sorted({e.state for e in elements}))
            line = mapped_lines.group_line(key, elements)
            latest = max(e.updated_at for e in elements)
            self._change(f"{key}[]", present, len(elements), line, "", latest, plain=True)
            failing = [e for e in elements if e.state in ("failed", "retrying")]
            if failing:
                self._changes(run, failing, now, {}, run_line=False)
        if finished:
            self._change("(run)", run.state, 0, f"run {run.workflow_name}", "", run.updated_at)

    def _change(
        self,
        key: str,
        state: str,
        attempt: int,
        label: str,
        suffix: str,
        now: datetime,
        *,
        plain: bool = False,
    ) -> None:
        before = self._seen.get(key)
        if before == (state, attempt):
            return
        self._seen[key] = (state, attempt)
        if plain:
            self.stream.write(f"{timefmt.clock(now)} {label}\n")
            return
        change = state if before is None else f"{before[0]} -> {state}"
        self.stream.write(f"{timefmt.clock(now)} {label}: {change}{suffix}\n")


def block(run: WorkflowRunView, tasks: Sequence[TaskRunView], now: datetime) -> list[Text]:
    """The live block: the run's summary line, then the task table, states coloured."""
    # The short id (its random end, aggregates/ids.py): it tells runs apart and pastes
    # back into every command, and leaves the line room for the counts.
    summary = Text(f"run {short_id(run.id)} {run.workflow_name}: ")
    summary.append(run.state, STATE_STYLES.get(run.state, ""))
    summary.append(
        f"  {timefmt.span(run.created_at, run.finished_at, now)}  ({render.counts(tasks)})"
    )
    # The error goes on a line of its own under its task: as a last column it would get
    # whatever width the other columns leave, often none.
    tasks, groups = mapped_lines.split(tasks)
    rows = [row[:-1] for row in render.task_rows(tasks, now)]
    lines = render.table(render.TASK_HEADERS[:-1], rows)
    state_at = lines[0].index("STATE")
    table = [Text(f"  {lines[0]}", "bold")]
    for line, row, task in zip(lines[1:], rows, tasks, strict=True):
        text = Text(f"  {line}")
        text.stylize(STATE_STYLES.get(row[1], ""), 2 + state_at, 2 + state_at + len(row[1]))
        table.append(text)
        if task.state in ("failed", "retrying") and task.error:
            table.append(Text(f"      {render.error_line(task.error)}", "red"))
    table += [Text(f"  {mapped_lines.group_line(k, e)}") for k, e in groups.items()]
    return [summary, *table]


def fit(line: Text, width: int) -> Text:
    """``line`` cut to ``width`` terminal cells, ending in "…" if it was longer."""
    fitted = line.copy()
    fitted.truncate(width, overflow="ellipsis")
    return fitted
