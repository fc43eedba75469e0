"""A mapped task (``map_over``) as of a past moment, for ``why --at``: it has no row of
its own, so it is derived as ``status`` derives it now (``app/mapped.py``), from its
upstream's state then and its elements' states then (``as_of.task_as_of``: a row not
changed since the moment is read as it is, one changed since from its own events).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from uuid import UUID

from flowforge.aggregates import mapping
from flowforge.aggregates.states import TaskRunState
from flowforge.app import as_of, mapped
from flowforge.app.results import MappedTaskView, TaskRunView
from flowforge.app.service import FlowForge


def mapped_tasks_as_of(
    app: FlowForge, run_id: UUID, keys: list[str], at: datetime
) -> dict[str, MappedTaskView]:
    """The mapped tasks among ``keys`` of run ``run_id`` as they stood at ``at``, by key."""
    definition = app.definitions.of(app.get_workflow_run(run_id))
    found = {}
    for key in mapped.mapped_among(definition, keys):
        over = definition.maps[key]
        upstream = app.task_run_by_key(run_id, over)
        state = None if upstream is None else _state_then(app, upstream, at)
        if upstream is None or state is not TaskRunState.SUCCEEDED:
            found[key] = mapped.view_of(definition, key, state, None, {})
            continue
        # A succeeded task's result never changes: its row's is the one it had then.
        map_key = definition.task(key).map_key
        elements = mapping.element_keys(key, upstream.result, map_key)
        rows = app.task_runs_by_keys(run_id, elements)
        counts = Counter(_element_state_then(app, row, at).value for row in rows)
        found[key] = mapped.view_of(definition, key, state, upstream.result, counts)
    return found


def _state_then(app: FlowForge, task: TaskRunView, at: datetime) -> TaskRunState | None:
    """``task``'s state at ``at`` (``None``: it did not exist yet)."""
    then = as_of.task_as_of(app, task, at).then
    return None if then is None else TaskRunState(then.target)


def _element_state_then(app: FlowForge, element: TaskRunView, at: datetime) -> TaskRunState:
    """An element's state at ``at`` as a mapped task counts it (``mapping.shown_state``);
    pending if it did not exist yet."""
    then = as_of.task_as_of(app, element, at).then
    if then is None:
        return TaskRunState.PENDING
    attempt = then.attempt if then.attempt is not None else element.attempt
    return mapping.shown_state(TaskRunState(then.target), attempt, element.max_attempts)
