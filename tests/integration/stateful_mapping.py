"""The mapped edge of a run's shape (issue 46) for ``test_stateful``'s model: a run may
map its last task over an earlier one; the upstream's success then creates one ready
element per item of its list result, in its own transaction, or, with a result that is
no list, is recorded as a failure (``MapOverError``) and creates nothing. A mapped task
may key its elements by each item's ``id`` (``map_key``): an item without a usable,
unique one is a failure too."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from hypothesis import strategies as st

from flowforge.aggregates import mapping, task_run
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import TaskRun
from flowforge.app.definition_files import load_definition
from flowforge.app.service import FlowForge

#: The results of a task others are mapped over: mostly lists (an empty one too),
#: sometimes no list (refused).
LISTS: st.SearchStrategy[Any] = st.one_of(
    st.lists(st.integers(0, 9), min_size=1, max_size=3),
    st.lists(st.text("ab", max_size=2), min_size=2, max_size=3),
    st.sampled_from([[], None, {"rows": 1}, "a, b"]),
)
#: The results of a task others are mapped over by ``id``: mostly keyable lists,
#: sometimes an item without a usable id, a duplicated one, or no list.
KEYED_LISTS: st.SearchStrategy[Any] = st.one_of(
    st.lists(st.sampled_from(["x", "y", 3]), unique=True, min_size=1, max_size=3).map(
        lambda ids: [{"id": i, "n": 1} for i in ids]
    ),
    st.lists(
        st.sampled_from([{"id": "x"}, {"id": 4}, {"name": "y"}, {"id": True}]),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([[], None]),
)


def draw_map_key(data: st.DataObject, spec: dict[str, Any]) -> None:
    """Sometimes a mapped task of ``spec`` keys its elements by each item's ``id``."""
    task = spec["tasks"][-1]
    if "map_over" in task and data.draw(st.booleans(), label="map_key"):
        task["map_key"] = "id"


def lists_for(spec: dict[str, Any]) -> st.SearchStrategy[Any]:
    """The results of the task ``spec``'s last task maps over."""
    return KEYED_LISTS if "map_key" in spec["tasks"][-1] else LISTS


def draw_map(data: st.DataObject, keys: list[str], deps: dict[str, list[str]]) -> str | None:
    """Sometimes (a run of two or three tasks) the last task maps over an earlier one,
    its only dependency (nothing else may be, and nothing depends on it); the key it
    maps over, or ``None``."""
    if len(keys) < 2 or not data.draw(st.booleans(), label="mapped"):
        return None
    over = data.draw(st.sampled_from(keys[:-1]), label="map_over")
    deps[keys[-1]] = [over]
    return over


def refused(
    result: Any, upstream: str, mapped: str, spec: dict[str, Any]
) -> dict[str, str] | None:
    """The error a success of ``upstream`` with ``result`` is recorded as instead (the
    lists drawn are far below the bound: a result that is no list, or whose items have
    no usable key)."""
    map_key = spec["tasks"][-1].get("map_key")
    problem = mapping.result_problem(result, upstream, [mapped], 10_000, {mapped: map_key})
    return None if problem is None else mapping.map_error(problem)


def elements(
    app: FlowForge,
    run_id: UUID,
    spec: dict[str, Any],
    mapped: str,
    result: list[Any],
    actor: str,
) -> list[tuple[UUID, TaskRun.Created]]:
    """The creation events a success with ``result`` must have written, one per item:
    each element ready, with its index and item, by the finish's actor, at the time its
    row was created (the expansion's), and no element more."""
    definition = load_definition(spec)
    over = definition.maps[mapped]
    rows = {row.task_key: row for row in app.task_runs(run_id)}
    assert sum(mapping.mapped_task_of(key) == mapped for key in rows) == len(result)
    found = []
    map_key = definition.task(mapped).map_key
    for index, item in enumerate(result):
        label = index if map_key is None else item[map_key]
        row = rows[f"{mapped}[{label}]"]
        event = task_run.created_event(
            row.id,
            at=row.created_at,
            workflow_run_id=run_id,
            task_key=row.task_key,
            task_type=definition.task(mapped).type,
            depends_on=[over],
            max_attempts=definition.retry_policy_for(mapped).max_attempts,
            lease_seconds=definition.lease_seconds_for(mapped),
            max_worker_losses=definition.max_worker_losses_for(mapped),
            state=TaskRunState.READY,
            actor=actor,
            map_index=index,
            map_item=item,
        )
        found.append((row.id, event))
    return found
