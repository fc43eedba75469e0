"""Each attempt's captured log on a task's page, beside its error (docs/logs.md),
read through the application service as ``flowforge logs`` reads it, and shown a page
of lines at a time: a handler that printed a million lines makes no page larger than
``LINES`` lines (the stored text itself is bounded by the worker's capture limit)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from flowforge.app.service import FlowForge

#: An attempt's log is shown this many lines a page.
LINES = 200


@dataclass(frozen=True, slots=True)
class LogPage:
    """A page of one attempt's log: its lines ``first`` to ``last`` of ``total``."""

    token: int
    text: str
    first: int
    last: int
    total: int
    page: int
    pages: int
    worker: str
    dropped_chars: int


def pages(app: FlowForge, task_run_id: UUID, token: int | None, page: int) -> dict[int, LogPage]:
    """Each stored log of the task by its claim's fencing token: page ``page`` of the
    claim ``token``'s, the first page of every other."""
    found: dict[int, LogPage] = {}
    for log in app.attempt_logs(task_run_id):
        lines = log.output.splitlines()
        count = max(1, -(-len(lines) // LINES))
        shown = min(max(1, page), count) if log.fencing_token == token else 1
        start = (shown - 1) * LINES
        part = lines[start : start + LINES]
        found[log.fencing_token] = LogPage(
            log.fencing_token,
            "\n".join(part),
            start + 1,
            start + len(part),
            len(lines),
            shown,
            count,
            log.worker_id,
            log.dropped_chars,
        )
    return found
