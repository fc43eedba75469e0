"""The store's writes: one write transaction, by aggregate, and the one write layer.

:class:`Writes` is what ``Store.write()`` yields: the reads of the transaction
(:class:`~flowforge.projections.reads.Reads`) and its writes, one part per concept:
``tasks`` (a task run's edges, ``tasks.py``), ``runs`` (a run's creation, edges and the
locks of an advance, ``runs.py``), ``leaves`` (the leaf shortcut, ``leaves.py``),
``outbox`` (dispatches, ``outbox.py``), ``limits`` (concurrency limits, ``concurrency_limits.py``),
``marks`` (the scheduler's wake-ups, ``marks.py``), ``schedules`` (cron schedules,
``cron_schedules.py``), ``rebuild`` (``rebuild.py``), ``archive`` (``archive.py``) and
``attempt_logs`` (``attempt_logs.py``).
Each edge is one conditional write with its event (``recording.py``) and what follows
it in the same transaction (the run's mark, the outbox row of a task that became
ready): the transaction commits all of it or none of it.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Mapper

from flowforge.projections.db.protocols import Transaction
from flowforge.projections.reads import Reads
from flowforge.projections.writes.archive import ArchiveWrites
from flowforge.projections.writes.attempt_logs import AttemptLogWrites
from flowforge.projections.writes.concurrency_limits import LimitWrites
from flowforge.projections.writes.cron_schedules import ScheduleWrites
from flowforge.projections.writes.leaves import Leaf, LeafSuccess, LeafWrites
from flowforge.projections.writes.marks import RunMarks
from flowforge.projections.writes.outbox import OutboxWrites
from flowforge.projections.writes.rebuild import RebuildWrites
from flowforge.projections.writes.recording import Recording
from flowforge.projections.writes.runs import RunWrites
from flowforge.projections.writes.tasks import MOVE_EDGES, TASK_EDGE_METHODS, TaskWrites

__all__ = ["MOVE_EDGES", "TASK_EDGE_METHODS", "Leaf", "LeafSuccess", "Writes"]


class Writes(Reads):
    """The reads and writes of one open transaction; it commits all of them or none.
    ``marks_runs``: whether an edge marks its run by itself (``RunMarks``)."""

    def __init__(
        self,
        tx: Transaction,
        mapper: Mapper[UUID],
        *,
        events_in_sql: bool,
        marks_runs: bool = True,
    ) -> None:
        super().__init__(tx)
        self.recording = Recording(tx, mapper, events_in_sql=events_in_sql)
        self.marks = RunMarks(tx, after_edges=marks_runs)
        self.outbox = OutboxWrites(tx)
        self.limits = LimitWrites(self.recording, self.outbox)
        self.tasks = TaskWrites(self.recording, self.marks, self.outbox, self.limits)
        self.leaves = LeafWrites(self.recording, self.marks, self.outbox)
        self.runs = RunWrites(self.recording, self.marks, self.tasks, self.limits, now=self.now)
        self.schedules = ScheduleWrites(self.recording, self.runs, now=self.now)
        self.rebuild = RebuildWrites(tx, bulk=events_in_sql)
        self.archive = ArchiveWrites(tx)
        self.attempt_logs = AttemptLogWrites(tx)
