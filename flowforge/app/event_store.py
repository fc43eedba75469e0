"""Opening FlowForge's persistence: the ``eventsourcing`` event store and the store.

Migrations are explicit. :func:`open_persistence` with ``migrate=True`` creates the
library's event table and applies the missing migrations, under a lock; with
``migrate=False`` it creates nothing and only checks the schema version, refusing a
database that is missing, behind or ahead, with the command that fixes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Transcoder

from flowforge import errors
from flowforge.projections import event_log, schema
from flowforge.projections.db.connect import (
    check_reachable,
    make_database,
    schema_creation_lock,
)
from flowforge.projections.db.errors import translate_errors
from flowforge.projections.db.location import parse_database_url, parse_listen_url
from flowforge.projections.store import Store


class EventStore(Application[UUID]):
    """The ``eventsourcing`` application that owns the event log (mapper, recorder,
    repository, notification log). FlowForge never calls its ``save``: every append
    goes through the store, in the transaction of its transition, in the stored form
    ``projections/event_log.py`` describes (the seam to the library: its name, its
    table, the state's encoding by the transcoder below)."""

    # The PostgreSQL recorder names its table after the application (event_log.py).
    name = event_log.APPLICATION_NAME

    #: Set once the library's constructor has returned: only a whole store is closed.
    _open = False

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__(env=env)
        self._open = True

    def construct_transcoder(self) -> Transcoder:
        transcoder = event_log.UserSafeJSONTranscoder()
        self.register_transcodings(transcoder)
        return transcoder

    def close(self) -> None:
        """Close once: FlowForge closes explicitly, and a second close (the library's
        ``__del__``) could run in one of the pool's own worker threads, which cannot join
        itself ("cannot join current thread")."""
        if self._open:
            self._open = False
            super().close()

    def __del__(self) -> None:
        # The library closes on garbage collection; only a store nobody closed needs it.
        if self._open:
            self.close()


@dataclass(frozen=True, slots=True)
class Persistence:
    events: EventStore
    store: Store
    schema_version: int

    def close(self) -> None:
        self.store.close()
        self.events.close()


def open_persistence(
    database_url: str,
    *,
    migrate: bool | None = None,
    listen_database_url: str | None = None,
    prepared_statements: bool = True,
) -> Persistence:
    """The event store and the store on ``database_url``, migrated or checked;
    ``listen_database_url``: where the wake-up listener connects, if not there;
    ``prepared_statements``: False behind a pooler that cannot keep them (PgBouncer)."""
    location = parse_database_url(database_url)
    listen_url = listen_database_url and parse_listen_url(listen_database_url, location)
    migrating = location.migrates_by_default if migrate is None else migrate
    if migrating:
        location.require_directory()
    else:
        location.require_existing_file()
    lock: AbstractContextManager[None] = (
        schema_creation_lock(location) if migrating else nullcontext()
    )
    with lock:
        try:
            with translate_errors(location.display):
                events = EventStore(
                    env=location.eventsourcing_env(
                        create_tables=migrating, prepared_statements=prepared_statements
                    )
                )
        except errors.DatabaseUnavailableError:
            check_reachable(location)  # names a missing database or role, if that is why
            raise
        try:
            database = make_database(
                event_log.datastore_of(events.recorder),
                location,
                listen_url,
            )
            version = schema.migrate(database) if migrating else schema.check(database)
        except errors.DatabaseUnavailableError:
            events.close()
            check_reachable(location)
            raise
        except BaseException:
            events.close()
            raise
    return Persistence(events, Store(database, events.mapper), version)
