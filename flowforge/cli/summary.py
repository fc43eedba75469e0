"""``flowforge status`` of a run too big to list: its tasks counted by state, then the
few a user acts on (failed, running, retrying, waiting the longest), on one screen at
any run size (at most :data:`MAX_LINES` lines).

A run of at most :data:`SMALL_RUN` tasks keeps the full listing (every task fits on a
screen, and nothing is hidden from a user who did not ask for a summary); ``--all`` lists
every task of any run, ``--state`` the tasks of one state, ``--limit``/``--after`` a page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime

from flowforge.app.results import RunSummary, TaskRunView
from flowforge.cli import render

#: A run of at most this many tasks is listed whole by default.
SMALL_RUN = 20
#: What the summary never exceeds, at any run size (issue #50).
MAX_LINES = 60
#: The order states are counted in, the same as :func:`render.counts`.
STATE_ORDER = ("succeeded", "running", "ready", "retrying", "pending", "failed", "cancelled")
#: How each section of tasks a user acts on is headed: the state, and which of its tasks
#: are shown (the longest waiting first: ``Queries.run_summary``).
HEADINGS: Mapping[str, str] = {
    "failed": "failed",
    "running": "running, the longest running first",
    "retrying": "retrying, the longest waiting first",
    "ready": "ready, waiting for a worker, the longest waiting first",
    "pending": "pending, the longest waiting first",
}


def counts_line(counts: Mapping[str, int]) -> str:
    """``49,998 succeeded, 2 failed (50,000 tasks)``."""
    known = [s for s in STATE_ORDER if counts.get(s)]
    other = sorted(s for s in counts if s not in STATE_ORDER and counts[s])
    parts = [f"{counts[s]:,} {s}" for s in (*known, *other)]
    total = sum(counts.values())
    return f"{', '.join(parts) or 'no tasks'} ({total:,} task{'' if total == 1 else 's'})"


def sections(
    summary: RunSummary, now: datetime, label: Callable[[TaskRunView], str] | None = None
) -> Iterator[str]:
    """The summary's sections of tasks to act on, a line at a time. ``label`` names a
    task's row (default: its key); a caller that groups mapped elements (``process[3]``
    under ``process``) passes its own."""
    for state, tasks in summary.notable.items():
        total = summary.counts.get(state, 0)
        shown = f"{len(tasks)} of {total:,}" if total > len(tasks) else f"{total:,}"
        yield f"\n{HEADINGS.get(state, state)} ({shown}):"
        rows = render.task_rows(tasks, now)
        if label is not None:
            for row, task in zip(rows, tasks, strict=True):
                row[0] = label(task)
        yield from render.table(render.TASK_HEADERS, rows, fit=render.WIDTH)


def more_lines(run_text: str, summary: RunSummary) -> list[str]:
    """How to see the rest."""
    states = [s for s in STATE_ORDER if summary.counts.get(s)]
    example = states[-1] if states else "failed"
    return [
        "",
        f"the rest: `flowforge status {run_text} --state {example}` (the tasks in one "
        f"state), `--all` (every task), `--json --limit 100` (a page, then --after KEY)",
    ]


def page_hint(run_text: str, state: str | None, limit: int, page: Sequence[TaskRunView]) -> str:
    """The command that shows the next page, if this one was full."""
    if len(page) < limit:
        return "(the last page)"
    only = f" --state {state}" if state else ""
    return (
        f"next page: `flowforge status {run_text}{only} --limit {limit} "
        f"--after {page[-1].task_key}`"
    )


#: The page ``--state`` or ``--after`` shows without ``--limit``.
PAGE = 100
