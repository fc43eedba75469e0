"""The seam to the ``eventsourcing`` library: everything FlowForge assumes about how the
library stores an event and what its recorder is, in one place.

FlowForge appends events with its own SQL, in the transaction of each transition
(docs/architecture.md, "How it fits the eventsourcing library"), and the library reads
them back (``repository.get``, the notification log, ``flowforge audit``). That works
only while FlowForge writes what the library's own recorder would have written:

- **The table.** The recorder's table: on PostgreSQL named after the application
  (:data:`APPLICATION_NAME` ``+ "_events"``, lower case), on SQLite the library's fixed
  ``stored_events`` (:data:`EVENT_TABLES`); its columns ``originator_id``,
  ``originator_version``, ``topic``, ``state``, primary key ``(originator_id,
  originator_version)``; its order of insertion ``notification_id`` on PostgreSQL,
  ``rowid`` on SQLite (:data:`EVENT_ORDERS`). The SQL names them through the
  ``{events_table}`` and ``{event_order}`` macros, filled from here
  (``statements.load``).
- **The originator id.** A ``uuid`` on PostgreSQL; its 32-digit hex on SQLite, as the
  SQLite recorder writes it (``tables.ColumnCodec.ORIGINATOR_ID``).
- **The topic.** :func:`topic_of`: the library's ``get_topic`` of the event's class.
- **The state.** The application mapper's ``to_stored_event(event).state``: the
  event's attributes as UTF-8 JSON written by the application's transcoder
  (:class:`UserSafeJSONTranscoder`: the library's ``JSONTranscoder`` with user JSON
  escaped, below), no compressor, no cipher. A value JSON has no type for is
  ``{"_type_": name, "_data_": ...}``: :data:`LIBRARY_TYPES` names the ones SQL writes
  itself (``event_sql.py`` builds a transition's state in the statement;
  ``writes/recording.py`` inserts the mapper's bytes, or cuts them around a time SQL
  fills in).
- **The recorder.** Its datastore's connection pool is borrowed (:func:`datastore_of`),
  so the event insert and the row's write are one transaction.

``tests/integration/test_library_contract.py`` holds the library to all of it: after a
workflow run through the service on each backend, the library's own recorder and
``Application.repository`` read every event FlowForge's SQL wrote and rebuild the same
aggregates the projected rows show. An upgrade of the library that changes the stored
form fails there, not in a user's database.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Recorder, Transcoding
from eventsourcing.utils import get_topic

from flowforge import errors
from flowforge.aggregates.base import Kind

#: The ``eventsourcing`` application's name: the PostgreSQL recorder names its table
#: after it (the library lowercases ``<name>_events``).
APPLICATION_NAME = "FlowForge"
#: The library's event table, per dialect.
EVENT_TABLES: Mapping[str, str] = MappingProxyType(
    {"postgres": f"{APPLICATION_NAME.lower()}_events", "sqlite": "stored_events"}
)
#: The column that orders the table by insertion, per dialect: the PostgreSQL
#: recorder's ``notification_id`` (a sequence); the SQLite table's ``rowid``.
EVENT_ORDERS: Mapping[str, str] = MappingProxyType(
    {"postgres": "notification_id", "sqlite": "rowid"}
)
#: The library transcoder's name for each non-JSON kind SQL encodes itself.
LIBRARY_TYPES: Mapping[Kind, str] = MappingProxyType(
    {Kind.TIMESTAMP: "datetime_iso", Kind.UUID: "uuid_hex"}
)


def topic_of(event_class: type) -> str:
    """The topic the library stores with an event of ``event_class`` (and resolves back
    to the class when it reads one)."""
    return get_topic(event_class)


def datastore_of(recorder: Recorder) -> object:
    """The datastore (PostgreSQL's or SQLite's, with its connection pool) behind the
    library's recorder.

    The one reach-in: the library's concrete recorders keep their datastore in a public
    attribute (``datastore``) that no base class or protocol of theirs declares, so
    the type of ``Application.recorder`` does not show it. FlowForge needs it to run
    the event insert in the transaction of its row's write, on the same pool; a library
    that stops keeping it fails here, by name, and in the contract test."""
    datastore = getattr(recorder, "datastore", None)
    if datastore is None:
        raise errors.ConfigurationError(
            f"the eventsourcing recorder {type(recorder).__name__} has no datastore: "
            "FlowForge cannot share its connections (an unsupported library version?)"
        )
    return datastore


# --- the transcoder: user JSON safe from the library's own encoding -----------------------
# The library encodes a non-JSON value as ``{"_type_": name, "_data_": ...}`` and, when
# reading, turns EVERY two-key object of that shape back into a value, including one
# that was a user's result or input. Such a user object would come back as something
# else, or fail to decode and make its aggregate unreadable. This transcoder escapes it
# on the way in (as a list of pairs, which the decoder leaves alone), so every user
# value comes back from the log exactly as it went in. ``event_sql.py`` escapes the
# same way in SQL.

#: The keys of the library's own encoding.
_RESERVED = frozenset({"_type_", "_data_"})


class _LookAlike:
    """A user dict with exactly the library's reserved keys."""

    __slots__ = ("items",)

    def __init__(self, items: dict[str, Any]) -> None:
        self.items = items


class _LookAlikeAsPairs(Transcoding):
    type = _LookAlike
    name = "flowforge_dict"

    def encode(self, obj: _LookAlike) -> list[list[Any]]:
        return [[key, value] for key, value in obj.items.items()]

    def decode(self, data: list[list[Any]]) -> dict[str, Any]:
        return dict(data)


#: What ``_escape`` walks into; anything else is a leaf, kept as it is.
_CONTAINERS = (dict, list, tuple)


def _escape(value: Any) -> Any:
    """``value`` with every dict of exactly the reserved keys wrapped, at any depth. It
    walks every event's whole state (a run's definition included), so a leaf is kept
    without a call: about half the calls, most of them on scalars, went."""
    if isinstance(value, dict):
        escaped = {
            key: _escape(item) if isinstance(item, _CONTAINERS) else item
            for key, item in value.items()
        }
        return _LookAlike(escaped) if escaped.keys() == _RESERVED else escaped
    if isinstance(value, list | tuple):
        return [_escape(item) if isinstance(item, _CONTAINERS) else item for item in value]
    return value


class UserSafeJSONTranscoder(JSONTranscoder):
    """The library's JSON transcoder, with user look-alikes escaped."""

    def __init__(self) -> None:
        super().__init__()
        self.register(_LookAlikeAsPairs())

    def encode(self, obj: Any) -> bytes:
        return super().encode(_escape(obj))
