"""Dynamic fan-out (issue 46): a task mapped over an upstream's list result.

A task declared with ``map_over = "list_files"`` has no task run of its own. When
``list_files`` succeeds, the same transaction creates one task run per element of its
result (a JSON list): ``process[0]``, ``process[1]``, ... (:func:`element_key`), or,
with ``map_key = "id"``, ``process[<the element's id>]`` (:func:`element_keys`), each a
``TaskRun.Created`` event carrying its index (``map_index``) and its input element
(``map_item``), each ready at once. Every guarantee is per element: its own claim,
lease, fencing token, retries, time-out, limits, routing by type and failure policy.

The mapped task's state is derived from its upstream and its elements
(:func:`mapped_state`): pending until the upstream succeeded; then succeeded once every
element has (at once for an empty list), failed if one failed for good, and so on. A
task that depends on the mapped task waits for that, and its handler gets the
elements' results as a list, in index order. Nested maps (a task mapped over a mapped
task) are refused at definition time (:func:`definition_problems`).

A result that is not a list, is longer than the workflow's ``max_map_elements``, or (with
a ``map_key``) has an element without a usable key (:func:`keys_problem`) makes the
upstream's finish a failure (``MapOverError``, :func:`result_problem`): nothing is
created, and the upstream's retry policy applies.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from flowforge.aggregates.states import TaskRunState

#: The bound a workflow's ``max_map_elements`` defaults to.
DEFAULT_MAX_MAP_ELEMENTS = 10_000
#: The largest bound a workflow may set: one expansion is one transaction.
MAX_MAP_ELEMENTS = 1_000_000
#: The error type of an upstream's finish refused because of its result.
MAP_OVER_ERROR = "MapOverError"

_ELEMENT = re.compile(r"(?P<task>[^\[\]]+)\[(?P<label>[^\[\]]+)\]")
_INDEX = re.compile(r"0|[1-9][0-9]*")
#: The longest element key label a map_key may give (a key is shown everywhere).
MAX_LABEL = 200
_T = TaskRunState


class MappedNode(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def depends_on(self) -> Sequence[str]: ...

    @property
    def map_over(self) -> str | None: ...

    @property
    def map_key(self) -> str | None: ...


def element_key(task_key: str, index: int) -> str:
    """The key of element ``index`` of the mapped task ``task_key``: ``process[3]``."""
    return f"{task_key}[{index}]"


def element_of(key: str) -> tuple[str, str] | None:
    """``("process", "3")`` for ``process[3]`` (``("process", "a.csv")`` for a map_key's
    ``process[a.csv]``); ``None`` for a key that names no element."""
    found = _ELEMENT.fullmatch(key)
    return None if found is None else (found["task"], found["label"])


def element_index(key: str) -> int | None:
    """3 for ``process[3]``; ``None`` for a key whose label is no index (a map_key's)."""
    found = element_of(key)
    return int(found[1]) if found is not None and _INDEX.fullmatch(found[1]) else None


def element_keys(task_key: str, result: Any, map_key: str | None = None) -> list[str]:
    """Every element key of the mapped task ``task_key`` expanded from ``result`` (its
    upstream's checked list; anything else: none), in index order: ``process[i]``, or
    with a ``map_key`` ``process[<the element's key>]``."""
    if not isinstance(result, list):
        return []
    if map_key is None:
        return [element_key(task_key, i) for i in range(len(result))]
    return [f"{task_key}[{item[map_key]}]" for item in result]


def keys_problem(result: list[Any], mapped: str, map_key: str) -> str | None:
    """Why the elements of ``result`` cannot be keyed by their ``map_key`` (``None``:
    they can): an element that is no JSON object, or lacks the key, or whose key is not
    a string or an integer, is empty, holds a bracket, or is another element's too."""
    seen: dict[str, int] = {}
    for index, item in enumerate(result):
        value = item.get(map_key) if isinstance(item, dict) else None
        label = value if isinstance(value, str) else None
        if isinstance(value, int) and not isinstance(value, bool):
            label = str(value)
        where = f"element {index} of the list {mapped!r} maps over"
        if label is None:
            return (
                f"{where} has no {map_key!r} (map_key) that is a string or an integer: "
                f"{mapped!r} keys its elements by it"
            )
        if not label or len(label) > MAX_LABEL or "[" in label or "]" in label:
            return (
                f"{where} has the {map_key!r} {label!r}: an element key must be 1 to "
                f"{MAX_LABEL} characters without brackets"
            )
        if label in seen:
            return f"{where} has the {map_key!r} {label!r}, as element {seen[label]} has"
        seen[label] = index
    return None


def mapped_task_of(key: str) -> str:
    """The definition's key of a task run's key: an element's mapped task, else itself."""
    found = element_of(key)
    return key if found is None else found[0]


def with_implied_dependency(data: Any) -> Any:
    """A task's fields with its ``map_over`` task among its ``depends_on`` (the
    dependency is implied); anything else as it is (pydantic then says what is wrong)."""
    if not isinstance(data, Mapping):
        return data
    over, depends_on = data.get("map_over"), data.get("depends_on", ())
    if isinstance(over, str) and isinstance(depends_on, list | tuple) and over not in depends_on:
        return {**data, "depends_on": [*depends_on, over]}
    return data


def definition_problems(tasks: Sequence[MappedNode]) -> list[str]:
    """The mapping problems of a definition's tasks: a map over itself, over an unknown
    task (reported as an unknown dependency), over a mapped task (nested maps), a
    mapped task with other dependencies (its elements are ready when its list is), or a
    ``map_key`` without a ``map_over``."""
    mapped = {t.key: t.map_over for t in tasks if t.map_over is not None}
    problems = []
    for i, task in enumerate(tasks):
        over = task.map_over
        if over is None:
            if task.map_key is not None:
                problems.append(
                    f"tasks[{i}].map_key: task {task.key!r} has a map_key but no map_over "
                    f"(the key names a field of each element of the list it maps over)"
                )
            continue
        if over == task.key:
            problems.append(f"tasks[{i}].map_over: task {task.key!r} cannot map over itself")
        elif over in mapped:
            problems.append(
                f"tasks[{i}].map_over: task {task.key!r} maps over {over!r}, itself mapped "
                f"over {mapped[over]!r}: nested maps are not supported (map over a task "
                f"that collects {over!r}'s results into one list instead)"
            )
        elif others := [d for d in task.depends_on if d != over]:
            problems.append(
                f"tasks[{i}].depends_on: task {task.key!r} maps over {over!r} and may depend "
                f"on nothing else (its elements are ready as soon as {over!r} returns its "
                f"list); make {', '.join(repr(d) for d in others)} upstream of {over!r}"
            )
    return problems


def result_problem(
    result: Any,
    upstream: str,
    mapped: Sequence[str],
    bound: int,
    map_keys: Mapping[str, str | None] | None = None,
) -> str | None:
    """Why ``upstream``'s result cannot be expanded for the tasks ``mapped`` over it
    (``None``: it can): not a JSON list, longer than ``bound``, or without the element
    keys a mapped task's ``map_key`` (in ``map_keys``) names (:func:`keys_problem`)."""
    names = ", ".join(repr(m) for m in mapped)
    if not isinstance(result, list):
        return (
            f"task {upstream!r} returned {type(result).__name__}, not a list: {names} "
            f"map(s) over its result, which must be a JSON list (one element per task run)"
        )
    if len(result) > bound:
        return (
            f"task {upstream!r} returned a list of {len(result)} elements, more than the "
            f"workflow's max_map_elements ({bound}) that {names} may expand into"
        )
    for task, map_key in (map_keys or {}).items():
        if map_key is not None and (problem := keys_problem(result, task, map_key)):
            return f"task {upstream!r} returned a list that {task!r} cannot key: {problem}"
    return None


def map_error(problem: str) -> dict[str, str]:
    """The error an upstream's refused finish records."""
    return {"type": MAP_OVER_ERROR, "message": problem}


def list_length(result: Any) -> int:
    """How many elements an upstream's (succeeded, checked) result expanded into."""
    return len(result) if isinstance(result, list) else 0


def shown_state(state: TaskRunState, attempt: int, max_attempts: int) -> TaskRunState:
    """An element's state as a mapped task counts it: failed with attempts left is on its
    way back to ready (the scheduler's ``schedule_retry`` has not passed yet), retrying."""
    if state is _T.FAILED and attempt < max_attempts:
        return _T.RETRYING
    return state


def mapped_state(
    upstream: TaskRunState | None, count: int, elements: Mapping[int, TaskRunState]
) -> TaskRunState:
    """A mapped task's state: ``upstream`` its upstream's state (``None``: no row read),
    ``count`` the length of its list, ``elements`` the (effective) states of the
    elements read, by index (one not read counts as pending).

    Pending until its upstream succeeded; then, over its elements, the spec's
    precedence: any cancelled, any failed, all succeeded (an empty list too), any
    retrying, any running, else ready.
    """
    if upstream is not _T.SUCCEEDED:
        return _T.PENDING
    states = [elements.get(i, _T.PENDING) for i in range(count)]
    if _T.CANCELLED in states:
        return _T.CANCELLED
    if _T.FAILED in states:
        return _T.FAILED
    if all(s is _T.SUCCEEDED for s in states):
        return _T.SUCCEEDED
    for state in (_T.RETRYING, _T.RUNNING, _T.READY):
        if state in states:
            return state
    return _T.PENDING


def group_keys(keys: Iterable[str]) -> dict[str, list[str]]:
    """The element keys of each mapped task among ``keys``, by mapped task key."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        found = element_of(key)
        if found is not None:
            groups.setdefault(found[0], []).append(key)
    return groups
