"""A run's audit log as of a moment: the one fold both replays read.

``flowforge why --at`` (``app/why/facts.py``) reconstitutes each aggregate of the run at
its last version no later than the moment; the web UI (``ui/replay.py``) shows each
task's state and attempts then. Both start from the same question, answered here once:
which entries had happened by then, and which was each aggregate's last.

:func:`task_as_of` and :func:`task_page_as_of` answer the same for one task, or a page
of a run's tasks, at any run size: a task not changed since the moment is read from its
row, one changed since from its own events; the run's whole log is never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from flowforge.app.results import AuditEntry, TaskRunView
from flowforge.app.service import FlowForge


@dataclass(frozen=True, slots=True)
class AsOf:
    """Audit entries (``FlowForge.run_history``) folded up to a moment."""

    #: The entries at or before the moment (all of them without one), in the log's order.
    entries: list[AuditEntry]
    #: Each aggregate's last entry among them, by id, in the order they first appear.
    last: dict[UUID, AuditEntry]
    #: The last entry of a workflow run among them (``None``: not created yet).
    run: AuditEntry | None

    @property
    def tasks(self) -> list[AuditEntry]:
        """Each task run's last entry, in the order the task runs first appear."""
        return [e for e in self.last.values() if e.aggregate == "TaskRun"]


def fold(history: Sequence[AuditEntry], at: datetime | None = None) -> AsOf:
    """``history`` as of ``at`` (``None``: the log's end)."""
    entries = [e for e in history if at is None or e.at <= at]
    last: dict[UUID, AuditEntry] = {}
    run: AuditEntry | None = None
    for entry in entries:
        last[entry.aggregate_id] = entry
        if entry.aggregate == "WorkflowRun":
            run = entry
    return AsOf(entries, last, run)


# --- bounded reads as of a moment, for one task or a page of a run's tasks (issue #50) ---


@dataclass(frozen=True, slots=True)
class TaskAsOf:
    """One task run as of a moment: its row now, and its last audit entry then (None:
    it did not exist yet)."""

    task: TaskRunView
    then: AuditEntry | None

    @property
    def state(self) -> str | None:
        """Its state then (None: not created yet)."""
        return None if self.then is None else self.then.target


def task_as_of(app: FlowForge, task: TaskRunView, at: datetime) -> TaskAsOf:
    """``task`` as of ``at``. A row whose last change came at or before ``at`` was then
    as it is now (``updated_at`` is its last event's time): only a task changed since
    reads its own events, never its run's."""
    if task.updated_at <= at:
        return TaskAsOf(task, _now_as_entry(task))
    then = fold(app.history(task.id), at)
    return TaskAsOf(task, then.entries[-1] if then.entries else None)


def task_page_as_of(
    app: FlowForge,
    run_id: UUID,
    at: datetime,
    *,
    after: str = "",
    limit: int = 100,
) -> list[TaskAsOf]:
    """A page of a run's tasks in key order (``FlowForge.task_runs_page``), each as of
    ``at``: what the web UI's page of a run at a past moment shows, at most ``limit``
    tasks' own events read, whatever the run's size."""
    return [task_as_of(app, t, at) for t in app.task_runs_page(run_id, after=after, limit=limit)]


def _now_as_entry(task: TaskRunView) -> AuditEntry:
    """The row's current state as the entry of its last change (its time, version and
    state; the fields a page of tasks shows)."""
    return AuditEntry(
        at=task.updated_at,
        aggregate="TaskRun",
        aggregate_id=task.id,
        version=task.version,
        event="",
        transition="",
        source=None,
        target=task.state,
        actor="",
        task_key=task.task_key,
        attempt=task.attempt,
        fencing_token=task.fencing_token,
    )
