"""How the CLI shows a mapped task's elements (``map_over``): grouped, one line per
mapped task (``process[0..9999]: 9,812 succeeded, 188 running``), never a line per
element unless asked (``status --all``, ``--state``, a page, ``why RUN/process[3]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flowforge.aggregates import mapping
from flowforge.app.results import MappedTaskView, TaskRunView, WorkflowRunView

#: The order states are counted in (``summary.STATE_ORDER``'s).
_ORDER = ("succeeded", "running", "ready", "retrying", "pending", "failed", "cancelled")


def split(tasks: Sequence[TaskRunView]) -> tuple[list[TaskRunView], dict[str, list[TaskRunView]]]:
    """The tasks that are no element, and the elements by mapped task key (in order)."""
    plain: list[TaskRunView] = []
    groups: dict[str, list[TaskRunView]] = {}
    for task in tasks:
        found = mapping.element_of(task.task_key) if task.map_index is not None else None
        if found is None:
            plain.append(task)
        else:
            groups.setdefault(found[0], []).append(task)
    for elements in groups.values():
        elements.sort(key=lambda t: t.map_index or 0)
    return plain, groups


def counts_text(counts: Mapping[str, int]) -> str:
    """``9,812 succeeded, 188 running``."""
    known = [s for s in _ORDER if counts.get(s)]
    other = sorted(s for s in counts if s not in _ORDER and counts[s])
    return ", ".join(f"{counts[s]:,} {s}" for s in (*known, *other)) or "no elements"


def group_line(key: str, elements: Sequence[TaskRunView]) -> str:
    """One mapped task's elements in one line, from their rows."""
    counts: dict[str, int] = {}
    for element in elements:
        counts[element.state] = counts.get(element.state, 0) + 1
    indexes = [e.map_index or 0 for e in elements]
    span = f"{key}[{min(indexes)}..{max(indexes)}]" if indexes else f"{key}[]"
    return f"{span}: {counts_text(counts)}"


def view_line(view: MappedTaskView) -> str:
    """One mapped task in one line, from its view (status's summary, ``why``)."""
    if view.elements is None:
        state = f" ({view.upstream_state})" if view.upstream_state else ""
        return f"{view.key}: not expanded yet: waits for {view.map_over}{state} to return its list"
    if view.elements == 0:
        return f"{view.key}[]: no elements ({view.map_over} returned an empty list): done"
    return f"{view.key_range}: {counts_text(view.counts)}"


#: A mapped task's elements named one by one up to this many; beyond, counted.
NAMED_ELEMENTS = 5


def grouped_keys(tasks: Sequence[TaskRunView]) -> str:
    """The tasks' keys, comma-separated, a mapped task's elements grouped when there
    are many: ``list_files, process[0..9999] (9,998 elements)``."""
    plain, groups = split(tasks)
    keys = [t.task_key for t in plain]
    for key, elements in groups.items():
        if len(elements) <= NAMED_ELEMENTS:
            keys += [e.task_key for e in elements]
        else:
            indexes = [e.map_index or 0 for e in elements]
            span = f"{key}[{min(indexes)}..{max(indexes)}]"
            keys.append(f"{span} ({len(elements):,} elements)")
    return ", ".join(keys)


def unexpanded(run: WorkflowRunView, tasks: Sequence[TaskRunView]) -> str:
    """``, process (once list_files returns its list)`` for each mapped task of
    ``run``'s definition with no element among ``tasks``; empty if none."""
    groups = split(tasks)[1]
    found = [
        f", {task['key']} (once {task['map_over']} returns its list)"
        for task in run.definition.get("tasks", [])
        if task.get("map_over") and task["key"] not in groups
    ]
    return "".join(found)
