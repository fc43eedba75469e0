"""What every FlowForge aggregate shares: its one field declaration and its scaffolding.

An aggregate declares its fields once, as two plain annotated classes (subclasses of
:class:`Fields`): the fields fixed at creation and the fields that change. Each field's
Python type is its type everywhere (events, aggregate, views); ``Annotated`` markers say
how users see it (:class:`Show`) and what it starts as (:class:`Initial`). Everything
else is derived from those two classes:

- the events' payloads: :class:`CreatedEvent` and :class:`TransitionedEvent` adopt the
  declared annotations of their ``Fields`` bases before the library makes them
  dataclasses, so a declared field is in every event that should carry it;
- the :class:`Declaration` (``declare``): the names, kinds and labels that the store, the
  ``why`` facts and the CLI read (``MUTABLE_FIELDS`` is ``declaration.mutable``).

Every aggregate here is a state machine, so ``state`` is not declared but implied: the
first mutable field, carried by every event, shown to users as ``state``.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from flowforge import errors

if TYPE_CHECKING:
    from flowforge.aggregates.machines import StateMachine, Transition

# --- the declaration ---------------------------------------------------------------------


class Fields:
    """A declaration of some of an aggregate's fields: annotations only, no values."""


@dataclass(frozen=True, slots=True)
class Show:
    """The field is shown to users, under ``label`` (default: its name); ``brief``:
    also in one-line summaries (e.g. ``why``'s facts about upstream tasks)."""

    label: str | None = None
    brief: bool = False


@dataclass(frozen=True, slots=True)
class Initial:
    """A changing field's value when the aggregate is created, and any field's value
    in events stored before it was declared (default: None)."""

    value: Any


class Kind(StrEnum):
    """How a field is stored: what a backend must convert."""

    TEXT = "text"
    INTEGER = "integer"
    UUID = "uuid"
    TIMESTAMP = "timestamp"
    REAL = "real"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class DeclaredField:
    name: str
    kind: Kind
    mutable: bool
    #: The key users see it under, or None: not shown.
    label: str | None
    brief: bool
    #: A mutable field's value at creation.
    initial: Any


@dataclass(frozen=True, slots=True)
class Declaration:
    """One aggregate's fields, in declaration order: fixed ones, then ``state`` and the
    other mutable ones."""

    aggregate: str
    fields: tuple[DeclaredField, ...]

    def __hash__(self) -> int:
        # Declarations key caches on every transition (``event_sql.json_fields``): the
        # generated hash walked every field of every declared field (~60 calls per
        # claim+finish). Equal declarations name the same aggregate, so this agrees
        # with ``==``.
        return hash(self.aggregate)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def static(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if not f.mutable)

    @property
    def mutable(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.mutable)

    @property
    def kinds(self) -> Mapping[str, Kind]:
        return {f.name: f.kind for f in self.fields}

    @property
    def shown(self) -> Mapping[str, str]:
        """Field name to the label users see it under, for every shown field."""
        return {f.name: f.label for f in self.fields if f.label is not None}

    @property
    def brief(self) -> Mapping[str, str]:
        return {f.name: f.label for f in self.fields if f.label is not None and f.brief}

    def carried(self, event: object) -> dict[str, Any]:
        """The mutable fields an event carries. An event stored before a field was
        declared lacks it: the field then had its initial value."""
        stored = vars(event)
        return {f.name: stored.get(f.name, f.initial) for f in self.fields if f.mutable}

    def initial(self) -> dict[str, Any]:
        """The mutable fields' values at creation (``state`` comes from the machine)."""
        return {f.name: f.initial for f in self.fields if f.mutable and f.name != "state"}

    def values(self, source: object) -> dict[str, Any]:
        """Every declared field of a row or an aggregate; ``state`` as its stored string."""
        values = {name: getattr(source, name) for name in self.names}
        values["state"] = str(values["state"])
        return values

    def shown_values(self, source: object, *, brief: bool = False) -> dict[str, Any]:
        """The shown fields of a row or an aggregate, keyed by their labels."""
        labels = self.brief if brief else self.shown
        return {label: _shown(getattr(source, name)) for name, label in labels.items()}


def declare(aggregate: str, fixed: type[Fields], changes: type[Fields]) -> Declaration:
    """The declaration of ``aggregate`` from its two ``Fields`` classes."""
    state = DeclaredField("state", Kind.TEXT, True, "state", True, None)
    return Declaration(
        aggregate,
        (*_declared(fixed, mutable=False), state, *_declared(changes, mutable=True)),
    )


def _declared(fields: type[Fields], *, mutable: bool) -> list[DeclaredField]:
    hints = typing.get_type_hints(fields, include_extras=True)
    declared: list[DeclaredField] = []
    markers: list[Any]
    for name in inspect.get_annotations(fields):
        hint, markers = hints[name], []
        if typing.get_origin(hint) is typing.Annotated:
            hint, *markers = typing.get_args(hint)
        show = next((m for m in markers if isinstance(m, Show)), None)
        initial = next((m.value for m in markers if isinstance(m, Initial)), None)
        label = None if show is None else show.label or name
        brief = show is not None and show.brief
        declared.append(DeclaredField(name, _kind(hint), mutable, label, brief, initial))
    return declared


def _kind(hint: Any) -> Kind:
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    alternatives = typing.get_args(hint) if optional else (hint,)
    kinds = {_KINDS.get(t, Kind.JSON) for t in alternatives if t is not type(None)}
    return kinds.pop() if len(kinds) == 1 else Kind.JSON


_KINDS: Mapping[Any, Kind] = {
    datetime: Kind.TIMESTAMP,
    UUID: Kind.UUID,
    int: Kind.INTEGER,
    float: Kind.REAL,
    str: Kind.TEXT,
}


def _shown(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


def declared_annotations(cls: type) -> dict[str, Any]:
    """The annotations of every ``Fields`` class ``cls`` inherits, base first."""
    annotations: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if issubclass(base, Fields) and base is not Fields:
            annotations.update(inspect.get_annotations(base))
    return annotations


def _adopt_declared_fields(cls: type) -> None:
    # Runs in __init_subclass__, before the library makes the class a dataclass: a
    # dataclass collects only its own annotations and its dataclass bases' fields.
    own = inspect.get_annotations(cls)
    cls.__annotations__ = {**declared_annotations(cls), **own}


_View = TypeVar("_View", bound=type)


@typing.dataclass_transform(frozen_default=True)
def view(cls: _View) -> _View:
    """A frozen dataclass of its own fields and every field its ``Fields`` bases declare
    (how ``why`` sees a task run, from its row or its aggregate)."""
    _adopt_declared_fields(cls)
    return dataclass(frozen=True)(cls)  # type: ignore[return-value]


# --- the events --------------------------------------------------------------------------


class CreatedEvent(Aggregate.Created):
    """The creation event: carries the declared fixed fields (a ``Fields`` base)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _adopt_declared_fields(cls)


class TransitionedEvent(Aggregate.Event):
    """One edge of the aggregate's machine (``TRANSITION``), carrying the whole mutable
    state after it (its ``Fields`` base), so the row can be rebuilt from any one event."""

    TRANSITION: ClassVar[str] = ""

    source: str
    actor: str
    state: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _adopt_declared_fields(cls)

    def apply(self, aggregate: MachineAggregate) -> None:
        aggregate.apply_transitioned(self)


# --- the aggregate -----------------------------------------------------------------------


def _initializer(declaration: Declaration) -> Any:
    def __init__(self: MachineAggregate, **created: Any) -> None:  # noqa: N807
        self._create_from(created)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)
        for name in (*declaration.static, "state")
    ]
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return __init__


_Event = TypeVar("_Event", bound=TransitionedEvent)


def check_replayable(
    machine: StateMachine,
    event: TransitionedEvent,
    not_edges: Mapping[str, tuple[StrEnum, StrEnum]],
) -> None:
    """``CorruptEventLogError`` naming the event unless it records a change the table
    allows: the edge its class names, with that edge's source AND target (or one of
    ``not_edges``, exactly). Replay trusts nothing else in an event: a forged one that
    names a real edge but lands in another state must not rebuild a row."""
    expected = not_edges.get(event.TRANSITION)
    if expected is None:
        problem = machine.replay_problem(event.TRANSITION, event.source, event.state)
    elif (event.source, event.state) != (expected[0].value, expected[1].value):
        problem = (
            f"{event.TRANSITION!r} records {event.source!r} -> {event.state!r}, not "
            f"{expected[0].value!r} -> {expected[1].value!r}"
        )
    else:
        problem = None
    if problem is not None:
        raise errors.CorruptEventLogError(f"{describe(event)}: {problem}")


def describe(event: Aggregate.Event) -> str:
    """How an error names an event: class, originator id and version."""
    return f"{type(event).__qualname__} of {event.originator_id} v{event.originator_version}"


class MachineAggregate(Aggregate):
    """An aggregate whose life is its machine's edges, one event class per edge."""

    if TYPE_CHECKING:
        # Set by each aggregate (class attributes, not annotations: the library makes an
        # annotated aggregate class a dataclass).
        DECLARATION: ClassVar[Declaration]
        MACHINE: ClassVar[StateMachine]
        #: Each edge's event class (``events_by_transition``).
        EVENTS: ClassVar[Mapping[str, type[TransitionedEvent]]]
        NOT_EDGES: ClassVar[Mapping[str, tuple[StrEnum, StrEnum]]]
        state: StrEnum

    #: Recorded changes that are not edges of the table (a heartbeat): name ->
    #: (source, target). A class attribute, not an annotation (see above).
    NOT_EDGES = types.MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if "DECLARATION" in cls.__dict__ and "__init__" not in cls.__dict__:
            # Before the library reads __init__'s signature to pick the Created event's
            # fields it passes: the declared fixed fields, and the initial state.
            setattr(cls, "__init__", _initializer(cls.DECLARATION))  # noqa: B010
        super().__init_subclass__(**kwargs)

    def _create_from(self, created: Mapping[str, Any]) -> None:
        """Fixed fields from the Created event (initial if it predates one), the rest
        from the declaration."""
        fixed = [f for f in self.DECLARATION.fields if not f.mutable]
        self.__dict__.update({f.name: created.get(f.name, f.initial) for f in fixed})
        self.__dict__.update(self.DECLARATION.initial())
        self.state = self.MACHINE.states(created.get("state", self.MACHINE.initial))

    def apply_transitioned(self, event: TransitionedEvent) -> None:
        """Set the row state an event carries, after checking it follows from ours: its
        source is our state, and its whole edge is the machine table's."""
        if event.source != self.state:
            raise errors.CorruptEventLogError(
                f"{describe(event)}: {event.TRANSITION!r} from {event.source!r}, but it "
                f"is {self.state.value!r}"
            )
        check_replayable(self.MACHINE, event, self.NOT_EDGES)
        self.__dict__.update(self.DECLARATION.carried(event))
        self.state = self.MACHINE.states(event.state)

    def snapshot(self) -> dict[str, Any]:
        """The current-state row this aggregate projects to (without timestamps)."""
        row = self.DECLARATION.values(self)
        row["id"] = self.id
        row["version"] = self.version
        return row

    def _take(self, edge: Transition, *, at: datetime, actor: str, **changes: Any) -> bool:
        """Take ``edge``: its event carries our mutable state with ``changes`` (``at`` is
        the database's clock)."""
        self._trigger(
            self.EVENTS[edge.name],
            source=edge.source,
            at=at,
            actor=actor,
            state=edge.target,
            **changes,
        )
        return True

    def _trigger(
        self,
        event_class: type[TransitionedEvent],
        *,
        source: str,
        at: datetime,
        actor: str,
        **changes: Any,
    ) -> None:
        values = {name: getattr(self, name) for name in self.DECLARATION.mutable}
        values.update(changes)
        values["state"] = str(values["state"])
        self.trigger_event(event_class, timestamp=at, source=str(source), actor=actor, **values)


def events_by_transition(
    aggregate: type[MachineAggregate], base: type[_Event]
) -> Mapping[str, type[_Event]]:
    """Each edge's event class among ``aggregate``'s nested ``base`` subclasses; an
    import-time error unless every edge of its machine has exactly one."""
    found = [
        cls
        for cls in vars(aggregate).values()
        if isinstance(cls, type) and issubclass(cls, base) and cls.TRANSITION in aggregate.MACHINE
    ]
    by_name = {cls.TRANSITION: cls for cls in found}
    if len(by_name) != len(found) or set(by_name) != {t.name for t in aggregate.MACHINE}:
        raise ValueError(f"{aggregate.__name__}: every edge needs exactly one event class")
    return by_name


def event_from_row(
    declaration: Declaration,
    event_class: type[_Event],
    row: Mapping[str, Any],
    *,
    source: str,
    actor: str,
) -> _Event:
    """The event a conditional write just made true, built from the row it returned.

    The row is the database's answer (its clock, its token), so the event records
    exactly what the row now says; ``row["version"]`` is the event's version.
    """
    values: dict[str, Any] = {name: row[name] for name in declaration.mutable}
    values.update(
        originator_id=row["id"],
        originator_version=row["version"],
        timestamp=row["updated_at"],
        source=source,
        actor=actor,
    )
    return event_class(**values)
