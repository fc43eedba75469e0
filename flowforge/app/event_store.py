"""Opening FlowForge's persistence: the ``eventsourcing`` event store and the store.

Migrations are explicit. :func:`open_persistence` with ``migrate=True`` creates the
library's event table and applies the missing migrations, under a lock; with
``migrate=False`` it creates nothing and only checks the schema version, refusing a
database that is missing, behind or ahead, with the command that fixes it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Transcoder

from flowforge.app.infrastructure import (
    DatabaseLocation,
    make_database,
    parse_database_url,
    schema_creation_lock,
)
from flowforge.app.transcoder import UserSafeJSONTranscoder
from flowforge.projections import schema
from flowforge.projections.database import translate_errors
from flowforge.projections.store import Store


class EventStore(Application[UUID]):
    """The ``eventsourcing`` application that owns the event log (mapper, recorder,
    repository, notification log). FlowForge never calls its ``save``: every append
    goes through the store, in the transaction of its transition."""

    # The PostgreSQL recorder names its table after the application: flowforge_events.
    name = "FlowForge"

    def construct_transcoder(self) -> Transcoder:
        transcoder = UserSafeJSONTranscoder()
        self.register_transcodings(transcoder)
        return transcoder


@dataclass(frozen=True, slots=True)
class Persistence:
    events: EventStore
    store: Store
    schema_version: int


def migrates_by_default(location: DatabaseLocation) -> bool:
    """The embedded default (SQLite) sets itself up; a shared server is migrated on
    purpose (``flowforge db migrate``), never as a side effect of a start."""
    return location.dialect == "sqlite"


def open_persistence(database_url: str, *, migrate: bool | None = None) -> Persistence:
    """The event store and the store on ``database_url``, migrated or checked."""
    location = parse_database_url(database_url)
    migrating = migrates_by_default(location) if migrate is None else migrate
    if migrating:
        location.require_directory()
    else:
        location.require_existing_file()
    lock: AbstractContextManager[None] = (
        schema_creation_lock(location) if migrating else nullcontext()
    )
    with lock:
        with translate_errors(location.display):
            events = EventStore(env=location.eventsourcing_env(create_tables=migrating))
        try:
            database = make_database(
                events.recorder.datastore,  # type: ignore[attr-defined]
                location,
            )
            version = schema.migrate(database) if migrating else schema.check(database)
        except BaseException:
            events.close()
            raise
    return Persistence(events, Store(database, events.mapper), version)
