"""The store: FlowForge's one persistence boundary.

Nothing outside ``flowforge.projections`` names a SQL statement or builds a parameter
bag: the application asks the store in the domain's words. ``Store.write()`` opens one
transaction and yields :class:`~flowforge.projections.writes.Writes` (the conditional
write of each transition, event storage, the outbox); ``Store.read()`` yields
:class:`~flowforge.projections.reads.Reads` (queries of the projected tables). Both
return typed rows (``flowforge.projections.tables``), the same types on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from eventsourcing.persistence import Mapper

from flowforge import observe
from flowforge.projections.db.protocols import Database, Transaction
from flowforge.projections.reads import Reads
from flowforge.projections.wakeups import Wakeups
from flowforge.projections.writes import Writes
from flowforge.projections.writes.archive import ArchiveWrites

#: The rebuild's first statements: the tables' exclusive locks, task_runs' with a bound
#: on the wait (the SQL says why).
_REBUILD_LOCKS = (
    "lock_projected_runs",
    "limit_rebuild_lock_wait",
    "lock_projected_tasks",
    "lock_projected_schedules",
)


class Store:
    """Typed reads and writes over one database backend and the event log's mapper."""

    def __init__(self, database: Database, mapper: Mapper[UUID]) -> None:
        self.database = database
        self._mapper = mapper
        # PostgreSQL builds a transition's event in its statement, as the library's
        # JSON transcoder would (projections/event_sql.py); a mapper that also
        # compresses or encrypts needs the event built in Python.
        self._events_in_sql = database.builds_events and not (mapper.compressor or mapper.cipher)
        #: This process's bells, rung after a commit that left work for a loop.
        self.wakeups = Wakeups()
        #: Other processes' bells, rung after such a commit (PostgreSQL's NOTIFY; the
        #: backend's own no-op where it has none).
        self._notifier = database.notifier()

    def close(self) -> None:
        self._notifier.close()

    @property
    def events_in_sql(self) -> bool:
        """Whether each transition's statement stores its own event (``Writes``)."""
        return self._events_in_sql

    @property
    def dialect(self) -> str:
        return self.database.dialect

    @property
    def location(self) -> str:
        return self.database.location

    @contextmanager
    def write(self, *, rebuild: bool = False, marks_runs: bool = True) -> Iterator[Writes]:
        """One write transaction: it commits everything written in it, or nothing.
        ``rebuild``: the rebuild's, which every other write waits for. ``marks_runs``:
        whether an edge marks its run by itself (``Writes``); the scheduler's own
        advance, which clears the marks, passes False.

        The rebuild's first statements take the projected tables' exclusive locks,
        giving up after a short wait for the second rather than deadlock with a write
        that holds it and waits for the first (``TransactionConflictError``: the
        rebuild tries again). Other writes take no lock of their own: each statement
        takes the locks it needs, then its snapshot, so none looks for row versions a
        rebuild it waited out has deleted (docs/architecture.md, "Writes and the
        rebuild").
        """
        tx: Transaction
        with self.database.transaction() as tx:
            if rebuild:
                for statement in _REBUILD_LOCKS:
                    tx.defer(statement)
            writes = Writes(
                tx, self._mapper, events_in_sql=self._events_in_sql, marks_runs=marks_runs
            )
            yield writes
        # Committed: count what it did, wake this process's loops, and other processes'
        # by a NOTIFY.
        observe.announce.transitions_committed(writes.recording.taken)
        if writes.marks.made:
            self.wakeups.runs.ring()
            self._notifier.request("notify_run_wakeups")
        if writes.outbox.enqueued:
            self.wakeups.outbox.ring()
            self._notifier.request("notify_outbox")

    @contextmanager
    def listening(self, *, ready_timeout: float = 0.0) -> Iterator[Wakeups]:
        """This process's bells, also rung by other processes' commits while open
        (PostgreSQL's LISTEN on a dedicated connection; on SQLite only this process's
        commits ring them). ``ready_timeout``: wait that long for LISTEN to be in place."""
        listener = self.database.listener(self.wakeups)
        try:
            if ready_timeout:
                listener.wait_listening(ready_timeout)
            yield self.wakeups
        finally:
            listener.close()

    @contextmanager
    def archive_read(self) -> Iterator[ArchiveWrites]:
        """The archive's reads (its choice of runs, their records), in one read as
        :meth:`read` opens it: a write lock would hold every writer back meanwhile."""
        tx: Transaction
        with self.database.read() as tx:
            yield ArchiveWrites(tx)

    @contextmanager
    def read(self) -> Iterator[Reads]:
        """One read of the projected tables. Each PostgreSQL statement sees what had
        committed when it began (READ COMMITTED, autocommitted); SQLite's deferred
        transaction is one snapshot."""
        tx: Transaction
        with self.database.read() as tx:
            yield Reads(tx)
