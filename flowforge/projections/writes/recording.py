"""How a transition's event is stored with its row: the recipe, and the transaction's log.

A transition's event goes to the ``eventsourcing`` library's table in the same
transaction as its conditional write: on PostgreSQL by the transition's own statement
(``event_sql``: the statement's ``recorded`` variant), otherwise built in Python from the
row the statement returned and inserted through the library's mapper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.base import Declaration, TransitionedEvent, event_from_row
from flowforge.aggregates.machines import Transition
from flowforge.projections import event_log, event_sql, projector, statements
from flowforge.projections.db.protocols import UNREAD_ROW, Row, Transaction
from flowforge.projections.reads import first_row
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow

_Recorded = TypeVar("_Recorded", TaskRunRow, WorkflowRunRow)
#: A named statement and its parameters, as ``Transaction.run_each`` takes them.
Statement = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class EventRecipe:
    """What a transition's event is made of before its row exists: its class (which
    names its aggregate's declaration), the state it left, and who; ``written``: the user
    JSON the statement itself writes (a finish's result and error)."""

    declaration: Declaration
    event_class: type[TransitionedEvent]
    source: str
    actor: str
    written: Mapping[str, Any] | None = None

    @classmethod
    def of_task(
        cls, edge: Transition, actor: str, written: Mapping[str, Any] | None = None
    ) -> EventRecipe:
        event_class = task_run.EVENT_FOR_TRANSITION[edge.name]
        return cls(task_run.DECLARATION, event_class, edge.source.value, actor, written)

    @classmethod
    def of_run(cls, edge: Transition, actor: str) -> EventRecipe:
        event_class = workflow_run.EVENT_FOR_TRANSITION[edge.name]
        return cls(workflow_run.DECLARATION, event_class, edge.source.value, actor)

    def parameters(self, transcoder: Transcoder) -> dict[str, Any]:
        """What the statement that stores it in SQL takes (``event_sql``): the user JSON
        it writes escaped by the event log's own transcoder, so it reads back as it was."""
        params: dict[str, Any] = {
            "event_topic": _topic(self.event_class),
            "event_source": self.source,
            "event_actor": self.actor,
        }
        for field in event_sql.json_fields(self.declaration):
            escaped = None
            if self.written is not None and field in self.written:
                escaped = transcoder.encode(self.written[field]).decode()
            params[event_sql.escaped_parameter(field)] = escaped
        return params

    def built_from(self, row: TaskRunRow | WorkflowRunRow) -> TransitionedEvent:
        """The same event built in Python, from the row the statement returned."""
        return event_from_row(
            self.declaration, self.event_class, row.values(), source=self.source, actor=self.actor
        )


class Recording:
    """The event log's side of one write transaction, shared by its parts."""

    def __init__(self, tx: Transaction, mapper: Mapper[UUID], *, events_in_sql: bool) -> None:
        self.tx = tx
        self._mapper = mapper
        #: Whether a transition's statement stores its event itself (PostgreSQL, with
        #: the library's plain JSON mapper: ``event_sql``) or :meth:`recorded` appends
        #: the event built in Python after it (SQLite).
        self.events_in_sql = events_in_sql
        #: Whether the transaction's last statement was sent, its COMMIT with it:
        #: nothing may be written after it.
        self.last_statement_sent = False
        #: The transitions written, ``(machine, edge)`` each: counted once committed.
        self.taken: list[tuple[str, str]] = []

    @property
    def mapper(self) -> Mapper[UUID]:
        """The library's mapper, for a statement that stores many events at once."""
        return self._mapper

    def append(self, events: Sequence[DomainEventProtocol[UUID]]) -> None:
        """Store events in the library's table. Its primary key (originator_id,
        originator_version) is the second guard: two events can never claim the same
        version of one aggregate."""
        for event in events:
            self.taken.append(machine_and_edge(type(event)))
            stored = self._mapper.to_stored_event(event)
            params = _stored_params(stored)
            if getattr(event, "timestamp", None) != projector.TRANSACTION_NOW:
                self.tx.defer("insert_stored_event", {**params, "state": stored.state})
                continue
            stamp = _transaction_now_stamp(self._mapper.transcoder)
            head, tail = around_transaction_now(stored.state, stamp)
            self.tx.defer(
                "insert_stored_event_at_now", {**params, "state_head": head, "state_tail": tail}
            )

    def append_timed(self, events: Sequence[DomainEventProtocol[UUID]]) -> None:
        """:meth:`append` of events that each carry their own time (none
        ``TRANSACTION_NOW``), in one statement run for all (``defer_many``)."""
        stored = [self._mapper.to_stored_event(event) for event in events]
        params = [{**_stored_params(s), "state": s.state} for s in stored]
        self.tx.defer_many("insert_stored_event", params)
        self.taken.extend(machine_and_edge(type(event)) for event in events)

    def creation_time(self, now: Callable[[], datetime]) -> datetime:
        """The time to create runs at: the database's clock (``now``). Where SQL builds
        events (PostgreSQL) that is the transaction's own now(), written by SQL in the
        rows and events (``projector.TRANSACTION_NOW``): no round trip to ask it first."""
        return projector.TRANSACTION_NOW if self.events_in_sql else now()

    def statement(self, name: str, params: dict[str, Any], event: EventRecipe) -> Statement:
        """The transition's statement: on PostgreSQL its variant that stores ``event``."""
        if not self.events_in_sql:
            return name, params
        event_params = event.parameters(self._mapper.transcoder)
        return statements.recorded_name(name), {**params, **event_params}

    def recorded(
        self, row_type: type[_Recorded], rows: list[Row], event: EventRecipe
    ) -> _Recorded | None:
        """The new row (``None``: lost, or written but not read), its event stored
        (SQLite: stored here)."""
        if rows and rows[0] is UNREAD_ROW:  # written, by a statement that stored its event
            self.taken.append(machine_and_edge(event.event_class))
            return None
        row = first_row(row_type, rows)
        if row is not None:
            if self.events_in_sql:
                self.taken.append(machine_and_edge(event.event_class))
            else:
                self.append([event.built_from(row)])
        return row

    def recorded_many(self, event: EventRecipe, count: int) -> None:
        """``count`` transitions whose statement stored each one's ``event`` itself."""
        self.taken.extend([machine_and_edge(event.event_class)] * count)

    def unread_where_stored(self, positions: list[int]) -> list[int]:
        """``positions`` (of transition statements in a ``run_each``) as its ``unread``:
        where the statement stores its event nobody needs its rows; where the event is
        built from the row it returns (SQLite), every row is read."""
        return positions if self.events_in_sql else []

    def commits(self, last: bool) -> bool:
        """Whether a transaction's last statement may carry its COMMIT: not when the
        event is built in Python, which is appended after the statement."""
        return last and self.events_in_sql


#: ``projector.TRANSACTION_NOW`` as a JSON string: what SQL replaces with now().
_QUOTED_TRANSACTION_NOW = f'"{projector.TRANSACTION_NOW.isoformat()}"'.encode()


@cache
def _transaction_now_stamp(transcoder: Transcoder) -> bytes:
    """How ``transcoder`` writes ``projector.TRANSACTION_NOW``: encoded once per event
    log, not once per creation event."""
    return transcoder.encode(projector.TRANSACTION_NOW)


def around_transaction_now(state: bytes, stamp: bytes) -> tuple[bytes, bytes]:
    """A stored state cut around the time in its one ``stamp`` (``TRANSACTION_NOW`` as
    the log's transcoder writes a datetime: ``{"_type_":"datetime_iso","_data_":
    "0001-..."}``). User JSON cannot forge the stamp: it holds no datetimes, and the
    transcoder escapes an object with those two keys; a user's string of that time
    can (it is the bare quoted time), which is why the whole stamp is looked for."""
    head, found, tail = state.partition(stamp)
    if not found or stamp in tail:
        raise ValueError("an event stamped TRANSACTION_NOW must carry the stamp exactly once")
    before, time, after = stamp.partition(_QUOTED_TRANSACTION_NOW)
    if not time:
        raise ValueError(f"the transcoder wrote TRANSACTION_NOW as {stamp!r}: no time in it")
    return head + before, after + tail


@cache
@cache
def machine_and_edge(event_class: type) -> tuple[str, str]:
    """The state machine (``task_run``, ``workflow_run``, ``schedule``) and the edge
    (``create`` for a creation) an event records: the transition counter's labels."""
    aggregate = event_class.__qualname__.split(".")[0]
    machine = "".join(f"_{c.lower()}" if c.isupper() else c for c in aggregate).lstrip("_")
    return machine, getattr(event_class, "TRANSITION", "create")


def _topic(event_class: type[TransitionedEvent]) -> str:
    return event_log.topic_of(event_class)


def _stored_params(stored: StoredEvent) -> dict[str, Any]:
    """The key and topic of a stored event's row (its state goes as the statement needs)."""
    return {
        "originator_id": stored.originator_id,
        "originator_version": stored.originator_version,
        "topic": stored.topic,
    }
