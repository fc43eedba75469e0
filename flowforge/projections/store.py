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

from flowforge.projections.database import Database, Transaction
from flowforge.projections.reads import Reads
from flowforge.projections.writes import Writes


class Store:
    """Typed reads and writes over one database backend and the event log's mapper."""

    def __init__(self, database: Database, mapper: Mapper[UUID]) -> None:
        self.database = database
        self._mapper = mapper

    @property
    def dialect(self) -> str:
        return self.database.dialect

    @property
    def location(self) -> str:
        return self.database.location

    @contextmanager
    def write(self) -> Iterator[Writes]:
        """One write transaction: it commits everything written in it, or nothing."""
        tx: Transaction
        with self.database.transaction() as tx:
            yield Writes(tx, self._mapper)

    @contextmanager
    def read(self) -> Iterator[Reads]:
        """One read-only transaction: a consistent snapshot of the projected tables."""
        tx: Transaction
        with self.database.read() as tx:
            yield Reads(tx)
