"""Mapped tasks (``aggregates.mapping``) as the application reads and writes them.

A mapped task has no row of its own: its elements' rows are created by its upstream's
success (:func:`expand`, in the finish's transaction), and its state is derived from
its upstream's row and its elements' (:func:`states`). Everything that reads a run's
upstreams applies one rule through here: a task that depends on a mapped task depends
on each of its elements (:func:`dependencies`), and is eligible once the mapped task
has succeeded (every element has; at once for an empty list).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any
from uuid import UUID

from flowforge.aggregates import mapping, run_plan
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.states import TaskRunState
from flowforge.app.results import MappedTaskView
from flowforge.projections.reads import Reads
from flowforge.projections.tables import TaskRunRow
from flowforge.projections.writes import Writes

_T = TaskRunState


def effective_state(task: TaskRunRow) -> TaskRunState:
    """A failed task with attempts left is on its way back to ready, not a failure."""
    return mapping.shown_state(task.task_state, task.attempt, task.max_attempts)


def mapped_keys(definition: WorkflowDefinition) -> list[str]:
    """The definition's mapped tasks, in its order."""
    return list(definition.maps)


def mapped_among(definition: WorkflowDefinition, keys: Collection[str]) -> list[str]:
    """The mapped tasks among ``keys``."""
    return [key for key in definition.maps if key in keys]


def upstreams_of(definition: WorkflowDefinition, keys: Collection[str]) -> set[str]:
    """The upstreams of the mapped tasks among ``keys``."""
    return {over for key, over in definition.maps.items() if key in keys}


def states(definition: WorkflowDefinition, rows: Iterable[TaskRunRow]) -> dict[str, TaskRunState]:
    """The (effective) state of every row read, by key, and of each mapped task, derived
    from its upstream's row and its elements' among ``rows`` (``mapping.mapped_state``)."""
    found = {row.task_key: row for row in rows}
    result = {key: effective_state(row) for key, row in found.items()}
    for key in mapped_keys(definition):
        result[key] = _mapped_state(definition, key, found)
    return result


def _mapped_state(
    definition: WorkflowDefinition, key: str, found: Mapping[str, TaskRunRow]
) -> TaskRunState:
    task = definition.task(key)
    assert task.map_over is not None
    upstream = found.get(task.map_over)
    if upstream is None:
        return _T.PENDING
    keys = mapping.element_keys(key, upstream.result, task.map_key)
    elements = {}
    for index, element in enumerate(keys):
        row = found.get(element)
        if row is not None:
            elements[index] = effective_state(row)
    return mapping.mapped_state(upstream.task_state, len(keys), elements)


def dependencies(
    definition: WorkflowDefinition, keys: Collection[str] = ()
) -> dict[str, tuple[str, ...]]:
    """Each task's direct dependencies, by key: the definition's, each element among
    ``keys`` depending on its mapped task's upstream, and each mapped task on its
    upstream and those elements (so a failed element is upstream of its reducer)."""
    found = {task.key: tuple(task.depends_on) for task in definition.tasks}
    for task_key, elements in mapping.group_keys(keys).items():
        if task_key not in found or (over := definition.task(task_key).map_over) is None:
            continue
        found[task_key] = (*found[task_key], *elements)
        for element in elements:
            found[element] = (over,)
    return found


def succeeded(definition: WorkflowDefinition, rows: Iterable[TaskRunRow]) -> set[str]:
    """The keys that count as succeeded for a dependant: rows and mapped tasks."""
    return {key for key, state in states(definition, rows).items() if state is _T.SUCCEEDED}


def refused_result(
    definition: WorkflowDefinition, upstream: str, result: Any
) -> dict[str, str] | None:
    """The error a success of ``upstream`` with ``result`` is recorded as instead, when
    tasks are mapped over it and the result is no list or too long; else ``None``."""
    mapped = definition.mapped_over(upstream)
    if not mapped:
        return None
    map_keys = {key: definition.task(key).map_key for key in mapped}
    bound = definition.max_map_elements
    problem = mapping.result_problem(result, upstream, mapped, bound, map_keys)
    return None if problem is None else mapping.map_error(problem)


def expand(
    writes: Writes, succeeded_row: TaskRunRow, definition: WorkflowDefinition, *, actor: str
) -> int:
    """In the transaction that wrote ``succeeded_row``'s success: create the elements
    of every task mapped over it (their rows, events and dispatches, written together
    with the rest of the transaction). How many were created."""
    if not definition.mapped_over(succeeded_row.task_key):
        return 0
    result = succeeded_row.result
    assert isinstance(result, list), "refused_result checks a mapped upstream's result"
    at = writes.now()  # a time of its own: the bulk statement stores it as it is
    events = run_plan.expansion_events(
        definition,
        succeeded_row.workflow_run_id,
        succeeded_row.task_key,
        result,
        at=at,
        actor=actor,
    )
    writes.tasks.create_many(events)
    return len(events)


def results(
    reads: Reads, definition: WorkflowDefinition, run_id: UUID, keys: Collection[str]
) -> dict[str, list[Any]]:
    """The results of the mapped tasks among ``keys``, each the list of its elements'
    results in index order (``None`` for one not succeeded; ``[]`` for an empty list)."""
    found: dict[str, list[Any]] = {}
    for key in keys:
        over = definition.maps.get(key)
        if over is None:
            continue
        upstream = reads.task_results(run_id, [over]).get(over)
        element_keys = mapping.element_keys(key, upstream, definition.task(key).map_key)
        elements = reads.task_results(run_id, element_keys)
        found[key] = [elements.get(k) for k in element_keys]
    return found


def view(
    definition: WorkflowDefinition,
    key: str,
    upstreams: Iterable[TaskRunRow],
    counts: Mapping[str, int],
) -> MappedTaskView:
    """The mapped task ``key`` as users see it, from its upstream's row (among
    ``upstreams``) and its elements' counts by state."""
    over = definition.task(key).map_over
    upstream = next((row for row in upstreams if row.task_key == over), None)
    if upstream is None:
        return view_of(definition, key, None, None, counts)
    return view_of(definition, key, upstream.task_state, upstream.result, counts)


def view_of(
    definition: WorkflowDefinition,
    key: str,
    upstream_state: TaskRunState | None,
    upstream_result: Any,
    counts: Mapping[str, int],
) -> MappedTaskView:
    """The mapped task ``key`` as users see it, from its upstream's state (``None``: no
    row) and result, and its elements' counts by state (now, or as of a past moment:
    ``why --at``)."""
    over = definition.task(key).map_over
    assert over is not None
    expanded = upstream_state is _T.SUCCEEDED
    elements = mapping.list_length(upstream_result) if expanded else None
    by_index = {}
    if elements:  # the derived state from the counts alone: any index of a state will do
        index = 0
        for state, count in counts.items():
            for _ in range(count):
                by_index[index] = TaskRunState(state)
                index += 1
    derived = mapping.mapped_state(upstream_state, elements or 0, by_index)
    return MappedTaskView(
        key=key,
        map_over=over,
        upstream_state=None if upstream_state is None else upstream_state.value,
        elements=elements,
        counts=dict(counts),
        state=derived.value,
    )
