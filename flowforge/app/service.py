"""The application service: ``FlowForge``, the only way to change FlowForge's state.

One class per concept, stacked (``app/core.py`` says why): queries
(``app/queries.py``), commands (``app/commands.py``), the outbox (``app/outbox.py``),
the scheduler's pass (``app/scheduling.py``); this module opens persistence
(``app/event_store.py``) and adds the rebuild (``app/rebuild.py``).
"""

from __future__ import annotations

from flowforge.app import rebuild
from flowforge.app.advance import Claims, Definitions
from flowforge.app.event_store import open_persistence
from flowforge.app.queries import REAP_BATCH
from flowforge.app.results import RebuildReport
from flowforge.app.scheduling import REDISPATCH_AFTER_S, Scheduling

__all__ = ["REAP_BATCH", "REDISPATCH_AFTER_S", "FlowForge"]


class FlowForge(Scheduling):
    """FlowForge's application service, configured by a database URL.

    ``migrate``: ``True`` creates the schema or applies the missing migrations (what
    ``flowforge db init`` / ``db migrate`` do); ``False`` creates nothing and refuses a
    database whose schema is missing, older or newer, naming the command that fixes it;
    ``None`` (the default) migrates the embedded SQLite default, so a script needs no
    set-up, and only checks a PostgreSQL database, which is migrated on purpose.

    ``listen_database_url``: where the scheduler's and publisher's wake-up listeners
    connect (PostgreSQL's LISTEN needs a session of its own); default the database URL.
    Set it to the server itself when the database URL goes through a PgBouncer in
    transaction pooling mode.

    ``prepared_statements``: PostgreSQL's server-side prepared statements (faster);
    ``False`` when the database URL goes through a pooler that cannot keep them, such
    as PgBouncer in transaction pooling mode (any version).
    """

    def __init__(
        self,
        database_url: str,
        *,
        migrate: bool | None = None,
        listen_database_url: str | None = None,
        prepared_statements: bool = True,
    ) -> None:
        opened = open_persistence(
            database_url,
            migrate=migrate,
            listen_database_url=listen_database_url,
            prepared_statements=prepared_statements,
        )
        self.events = opened.events
        self.store = opened.store
        self.schema_version = opened.schema_version
        with self._reads() as reads:
            self.deployment_id = reads.deployment_id()
        self.definitions = Definitions()
        self.claims = Claims()

    def close(self) -> None:
        self.store.close()
        self.events.close()

    def __enter__(self) -> FlowForge:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def rebuild_projections(self) -> RebuildReport:
        """Delete the projected rows and rebuild them from the log (``app/rebuild.py``)."""
        return rebuild.rebuild_projections(self.store, self.events)
