"""A run's marks (``run_wakeups``): "this run needs advancing", written with the change.

A transition that can change what its run should do next marks the run in its own
transaction; the commit wakes the schedulers (``projections/wakeups.py``), and the
advance clears the marks it has seen.
"""

from __future__ import annotations

from uuid import UUID

from flowforge.projections.db.protocols import Transaction


class RunMarks:
    """The marks of one write transaction. ``after_edges``: whether an edge marks its
    run by itself; the scheduler's own advance turns it off (it clears the run's marks
    and would only wake itself again) and marks explicitly where it must."""

    def __init__(self, tx: Transaction, *, after_edges: bool = True) -> None:
        self._tx = tx
        self.after_edges = after_edges
        #: Whether this transaction left a mark (the store rings the schedulers).
        self.made = False

    def mark(self, run_id: UUID, task_key: str | None = None) -> None:
        """Record that the run needs advancing, because of a change to ``task_key`` (or
        to the run itself: ``None``); on PostgreSQL the commit NOTIFYs."""
        self._tx.defer("mark_run_wakeup", {"workflow_run_id": run_id, "task_key": task_key})
        self.made = True

    def after_edge(self, run_id: UUID, task_key: str | None = None) -> None:
        """:meth:`mark`, unless edges leave marking to their caller."""
        if self.after_edges:
            self.mark(run_id, task_key)

    def clear(self, run_id: UUID) -> list[str | None]:
        """Delete the run's marks that this statement sees; the task keys they named
        (``None`` for a mark of the run itself). A mark committed after this statement
        stays, so the change it announces is advanced next time."""
        rows = self._tx.run("delete_run_wakeups", {"workflow_run_id": run_id})
        return [row["task_key"] for row in rows]
