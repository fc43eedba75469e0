"""A transition's event, built by PostgreSQL in the statement that makes the transition.

On PostgreSQL a task transition is ONE statement: the conditional UPDATE in a CTE, the
INSERT of its event into the event log in another, reading the row the UPDATE returned
(``WITH t AS (UPDATE ... RETURNING *), e AS (INSERT ... SELECT ... FROM t) SELECT * FROM
t``). No row matched (a lost race, a stale token): no event either. The event is what
``aggregates.base.event_from_row`` builds in Python from the same row: the declaration's
mutable fields, plus ``timestamp`` (the row's ``updated_at``), ``source`` and ``actor``,
encoded as the ``eventsourcing`` library's JSON transcoder encodes them
(``{"_type_": "datetime_iso", "_data_": ...}`` for a timestamp, ``uuid_hex`` for a UUID)
so the library reads it back as the same event (what FlowForge assumes of the library's
stored form is in ``event_log.py``). The SQL is generated here from the aggregate's field
declaration, so a field added to the aggregate is in its SQL events too.

User JSON (a result, an error) must be escaped as ``event_log.UserSafeJSONTranscoder``
escapes it: an object with exactly the library's two reserved keys becomes ``{"_type_":
"flowforge_dict", "_data_": [[key, value], ...]}``. A value the statement itself writes
(a finish's result and error) comes escaped, by that transcoder, as the parameter
``event_<field>``. A value carried from the row is used as it is when its text has no
``"_type_"`` (exact for JSON that Python's ``json.dumps`` wrote, which never escapes
those characters: only then can an object have that key), else escaped in SQL by
``flowforge_event_json``, a function the schema creates.
tests/integration/projections/test_event_sql.py proves the two encodings read back equal.
"""

from __future__ import annotations

from functools import cache

from flowforge.aggregates.base import Declaration, Kind
from flowforge.projections import event_log

#: The row alias the UPDATE's CTE is named by, and the event CTE's.
ROW = "t"
#: The prefix of the parameter that carries a JSON field's escaped value (NULL: the row's).
ESCAPED_PARAMETER_PREFIX = "event_"
#: The library's encoding of a non-JSON value: its ``_type_`` name per kind.
_LIBRARY_TYPES = event_log.LIBRARY_TYPES


def _library_value(kind: Kind, column: str) -> str:
    """``column`` as the library's transcoder writes a value of ``kind`` (NULL as null)."""
    data = f"replace({column}::text, '-', '')" if kind is Kind.UUID else column
    encoded = f"json_build_object('_type_', '{_LIBRARY_TYPES[kind]}', '_data_', {data})"
    return f"CASE WHEN {column} IS NULL THEN NULL ELSE {encoded} END"


def escaped_parameter(field: str) -> str:
    """The parameter naming ``field``'s value as the event carries it, escaped."""
    return ESCAPED_PARAMETER_PREFIX + field


def _user_json(field: str, column: str) -> str:
    """User JSON escaped like ``UserSafeJSONTranscoder`` (see the module's docstring)."""
    carried = (
        f"CASE WHEN strpos({column}::text, '\"_type_\"') = 0 "
        f"THEN {column} ELSE flowforge_event_json({column}) END"
    )
    return f"coalesce(:{escaped_parameter(field)}::json, {carried})"


def _field(kind: Kind, name: str) -> str:
    column = f"{ROW}.{name}"
    if kind in _LIBRARY_TYPES:
        return _library_value(kind, column)
    if kind is Kind.JSON:
        return _user_json(name, column)
    if kind in (Kind.TEXT, Kind.INTEGER):
        return column
    # PostgreSQL writes a whole double as 30, which the library would read back as an
    # int: a changing real field needs an encoding of its own before it can be here.
    raise ValueError(f"no SQL event encoding for a changing {kind.value} field ({name})")


@cache
def json_fields(declaration: Declaration) -> tuple[str, ...]:
    """The changing fields that hold user JSON: each has its ``event_<field>``. Cached:
    every transition's parameters ask, and the declaration derives its parts anew."""
    kinds = declaration.kinds
    return tuple(name for name in declaration.mutable if kinds[name] is Kind.JSON)


def event_state(declaration: Declaration) -> str:
    """The SQL (bytea) of a transition event's stored state, from the row ``t``."""
    pairs = [
        ("timestamp", _library_value(Kind.TIMESTAMP, f"{ROW}.updated_at")),
        # Cast: json_build_object takes "any", which gives a parameter no type.
        ("source", ":event_source::text"),
        ("actor", ":event_actor::text"),
    ]
    kinds = declaration.kinds
    pairs += [(name, _field(kinds[name], name)) for name in declaration.mutable]
    body = ",\n    ".join(f"'{name}', {value}" for name, value in pairs)
    return f"convert_to(json_build_object(\n    {body})::text, 'UTF8')"


def recorded(
    update: str, declaration: Declaration, events_table: str, also: str = "", returning: str = "*"
) -> str:
    """``update`` (a conditional UPDATE ... RETURNING *, as rendered, without its ``;``)
    as one statement that also stores its event; it returns the UPDATE's rows (the
    columns ``returning`` names). ``also``: more CTEs (each ending with a comma) run in
    the same statement, reading ``t``."""
    return (
        f"WITH {ROW} AS ({update}),\n{also}"
        f"e AS (INSERT INTO {events_table} (originator_id, originator_version, topic, state)\n"
        f"  SELECT {ROW}.id, {ROW}.version, :event_topic::text, {event_state(declaration)}\n"
        f"  FROM {ROW})\n"
        f"SELECT {returning} FROM {ROW}"
    )
