"""What every part of the application service shares: the event store, the store, and
one transaction at a time.

``FlowForge`` (``app/service.py``) is assembled from one class per concept, each a
subclass of the one before: :class:`ServiceCore` → queries → commands → outbox →
scheduling → ``FlowForge``. Each part reaches persistence only through the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from flowforge.app.advance import Claims, Definitions
from flowforge.app.event_store import EventStore
from flowforge.projections.db.protocols import Database
from flowforge.projections.reads import Reads
from flowforge.projections.store import Store
from flowforge.projections.wakeups import Wakeups
from flowforge.projections.writes import Writes


class ServiceCore:
    """The service's persistence, set by ``FlowForge.__init__``."""

    events: EventStore
    store: Store
    schema_version: int
    #: The deployment this database is: it names the dispatch topology
    #: (``BrokerConfig.for_deployment``) and is stamped on every dispatch.
    deployment_id: str
    #: Parsed definitions of the runs this process advances (``app/advance.py``).
    definitions: Definitions
    #: The tasks this process claimed and has not finished (``app/advance.py``).
    claims: Claims

    @property
    def database(self) -> Database:
        """The database backend (its ``dialect`` and ``location``)."""
        return self.store.database

    @database.setter
    def database(self, database: Database) -> None:
        # The contract tests swap in a database that fails on any use, to prove that an
        # illegal command raises before any SQL.
        self.store.database = database

    @contextmanager
    def _writes(self, *, marks_runs: bool = True) -> Iterator[Writes]:
        """One write transaction: the one rule's steps, committed together or not at all.
        ``marks_runs=False`` for the scheduler's advance (see ``Writes``)."""
        with self.store.write(marks_runs=marks_runs) as writes:
            yield writes

    def listening(self, *, ready_timeout: float = 0.0) -> AbstractContextManager[Wakeups]:
        """This process's wake-up bells, rung by any process's commits while open
        (``flowforge/projections/wakeups.py``)."""
        return self.store.listening(ready_timeout=ready_timeout)

    @contextmanager
    def _reads(self) -> Iterator[Reads]:
        with self.store.read() as reads:
            yield reads
