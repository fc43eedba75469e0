"""A run's audit log as of a moment: the one fold both replays read.

``flowforge why --at`` (``app/why/facts.py``) reconstitutes each aggregate of the run at
its last version no later than the moment; the web UI (``ui/replay.py``) shows each
task's state and attempts then. Both start from the same question, answered here once:
which entries had happened by then, and which was each aggregate's last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from flowforge.app.results import AuditEntry


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
