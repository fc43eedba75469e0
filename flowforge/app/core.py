"""What every part of the application service shares: the event store, the store, the
caches of this process, and one transaction at a time.

``FlowForge`` (``app/service.py``) composes one part per concept over one
:class:`ServiceCore`: queries, commands, the outbox, the scheduler's pass. Each part
reaches persistence only through the store.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from uuid import UUID

from flowforge import errors
from flowforge.app.caches import ClaimCache, DefinitionCache
from flowforge.app.event_store import Persistence
from flowforge.app.scope import Scope
from flowforge.projections.db.protocols import Database
from flowforge.projections.reads import Reads
from flowforge.projections.wakeups import Wakeups
from flowforge.projections.writes import Writes


class ServiceCore:
    """The service's persistence, opened by ``FlowForge.__init__``."""

    def __init__(self, opened: Persistence) -> None:
        self._opened = opened
        self.events = opened.events
        self.store = opened.store
        self.schema_version = opened.schema_version
        try:
            with self.reads() as reads:
                #: The deployment this database is: it names the dispatch topology
                #: (``BrokerConfig.for_deployment``) and is stamped on every dispatch.
                self.deployment_id = reads.deployment_id()
        except BaseException:
            opened.close()
            raise
        #: Parsed definitions of the runs this process advances (``app/advance.py``).
        self.definitions = DefinitionCache()
        #: The tasks this process claimed and has not finished (``app/advance.py``).
        self.claims = ClaimCache()

    @property
    def database(self) -> Database:
        """The database backend (its ``dialect`` and ``location``)."""
        return self.store.database

    @database.setter
    def database(self, database: Database) -> None:
        # The contract tests swap in a database that fails on any use, to prove that an
        # illegal command raises before any SQL.
        self.store.database = database

    def writes(self, *, marks_runs: bool = True) -> AbstractContextManager[Writes]:
        """One write transaction: the one rule's steps, committed together or not at all.
        ``marks_runs=False`` for the scheduler's advance (see ``Writes``)."""
        return self.store.write(marks_runs=marks_runs)

    def listening(self, *, ready_timeout: float = 0.0) -> AbstractContextManager[Wakeups]:
        """This process's wake-up bells, rung by any process's commits while open
        (``flowforge/projections/wakeups.py``)."""
        return self.store.listening(ready_timeout=ready_timeout)

    def reads(self) -> AbstractContextManager[Reads]:
        """One read of the projected tables."""
        return self.store.read()

    def covers(self, scope: Scope | None, run_id: UUID) -> bool:
        """Whether ``scope`` takes in the run (no scope: every run). A run's task types
        come from its definition, parsed once per process (it never changes)."""
        return scope is None or scope.covers(run_id, self._task_types_of)

    def _task_types_of(self, run_id: UUID) -> list[str]:
        definition = self.definitions.cached(run_id)
        if definition is None:
            with self.reads() as reads:
                run = reads.workflow_run(run_id)
            if run is None:
                raise errors.UnknownRunError(
                    f"no workflow run {run_id}; list runs with `flowforge runs`"
                )
            definition = self.definitions.of(run)
        return [task.type for task in definition.tasks]

    def close(self) -> None:
        self._opened.close()
