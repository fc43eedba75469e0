"""The service returns the application's views, never the store's rows.

The CLI, the UI and the processes read what ``FlowForge``'s public methods return; a
type of ``flowforge.projections`` reachable from one of them (in a union, a container, a
tuple, a dataclass's field, a protocol's member) would tie them to a column again.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import pytest

from flowforge.app import results
from flowforge.app.commands import Commands
from flowforge.app.cron_schedules import Schedules
from flowforge.app.service import FlowForge
from flowforge.projections import tables

STORE = "flowforge.projections"


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(function)


def _members(cls: type) -> Iterator[Any]:
    """The types a FlowForge class (not the store's) carries: a dataclass's fields, a
    protocol's members' and properties' return types."""
    if dataclasses.is_dataclass(cls):
        yield from typing.get_type_hints(cls).values()
    if getattr(cls, "_is_protocol", False):
        for name, member in vars(cls).items():
            function = member.fget if isinstance(member, property) else member
            if not name.startswith("_") and inspect.isfunction(function):
                yield _hints(function).get("return")


def store_types_in(hint: Any, seen: set[Any] | None = None) -> set[str]:
    """Every type of the store reachable from ``hint``, by qualified name."""
    seen = set() if seen is None else seen
    if hint is None or hint in seen:
        return set()
    seen.add(hint)
    found: set[str] = set()
    for arg in typing.get_args(hint):  # unions, generics, containers, tuples
        found |= store_types_in(arg, seen)
    origin = typing.get_origin(hint)
    if origin is not None and origin is not types.UnionType and origin is not typing.Union:
        found |= store_types_in(origin, seen)
    if isinstance(hint, type):
        module = hint.__module__
        if module.startswith(STORE):
            found.add(f"{module}.{hint.__qualname__}")
        elif module.startswith("flowforge."):
            for member in _members(hint):
                found |= store_types_in(member, seen)
    return found


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


@pytest.mark.parametrize("name", sorted(public_methods(FlowForge)))
def test_no_public_method_of_the_service_returns_a_type_of_the_store(name: str) -> None:
    returns = _hints(public_methods(FlowForge)[name])["return"]

    assert store_types_in(returns) == set(), f"FlowForge.{name} returns {returns}"


@pytest.mark.parametrize(
    "method",
    [
        Commands.claim_task_run_and_its_run,
        Commands.claim_task_runs_and_their_runs,
        Schedules.get_schedule,
        Schedules.list_schedules,
    ],
)
def test_the_check_finds_a_row_where_a_part_returns_one_and_the_service_converts_it(
    method: Callable[..., Any],
) -> None:
    # The parts behind these return rows; FlowForge converts them (app/service.py). The
    # check must see the rows there, or the test above proves nothing.
    assert store_types_in(_hints(method)["return"])
    assert not store_types_in(_hints(getattr(FlowForge, method.__name__))["return"])


def test_the_check_reaches_into_dataclasses_and_protocols() -> None:
    field = ("rows", dict[str, list[tables.TaskRunRow] | None])
    theirs = dataclasses.make_dataclass("Carrier", [field])
    ours: Any = dataclasses.make_dataclass("Carrier", [field])
    ours.__module__ = "flowforge.app.example"

    assert store_types_in(theirs) == set()  # not FlowForge's: not looked into
    hint = types.GenericAlias(tuple, (int, ours | None))
    assert store_types_in(hint) == {f"{STORE}.tables.TaskRunRow"}
    assert store_types_in(results.WakeupBells) == set()


# --- the conversions ----------------------------------------------------------------------

VIEWS: list[tuple[type[Any], type[Any], Callable[[Any], Any]]] = [
    (tables.TaskRunRow, results.TaskRunView, results.task_run_view),
    (tables.WorkflowRunRow, results.WorkflowRunView, results.workflow_run_view),
    (tables.ScheduleRow, results.ScheduleView, results.schedule_view),
    (tables.OutboxRow, results.DispatchView, results.dispatch_view),
]


@pytest.mark.parametrize(("row_type", "view_type", "convert"), VIEWS)
def test_each_view_carries_each_field_of_its_row_under_the_same_name(
    row_type: type[Any], view_type: type[Any], convert: Callable[[Any], Any]
) -> None:
    names = [f.name for f in dataclasses.fields(row_type)]
    # A distinct value per field: a conversion that swaps two fields fails.
    row = row_type(*(UUID(int=i) for i in range(len(names))))

    view = convert(row)

    assert isinstance(view, view_type)
    assert {f.name for f in dataclasses.fields(view_type)} == set(names)
    assert {name: getattr(view, name) for name in names} == row.values()
