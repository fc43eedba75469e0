"""How the CLI shows a mapped task's elements (``map_over``): grouped, one line per
mapped task (``process[0..9999]: 9,812 succeeded, 188 running``), never a line per
element unless asked (``status --all``, ``--state``, a page, ``why RUN/process[3]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence

from flowforge.aggregates import mapping
from flowforge.app.results import AuditEntry, MappedTaskView, TaskRunView, WorkflowRunView

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
    """One mapped task's elements in one line, from their rows (one failed with attempts
    left counted as retrying, as ``view_line``'s counts)."""
    counts: dict[str, int] = {}
    for element in elements:
        state = mapping.shown_state(element.task_state, element.attempt, element.max_attempts)
        counts[state.value] = counts.get(state.value, 0) + 1
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


#: The transitions a run's history collapses when consecutive elements of one mapped
#: task take them: an expansion's creations (no note under their lines, as a claim's
#: lease or a finish's result has: those stay one line each).
COLLAPSED = frozenset({"create"})
#: Fewer consecutive elements than this are shown one by one.
COLLAPSE_FROM = 3


def collapsed_history(entries: Iterable[AuditEntry]) -> Iterator[AuditEntry]:
    """A run's audit entries as they come, each run of consecutive entries of one
    mapped task's elements taking one transition (a 10,000-element expansion's
    creations) as ONE entry, its task ``process[0..9999] (10,000 elements)``; still a
    stream: at most ``COLLAPSE_FROM`` entries of a run are held."""
    held: list[AuditEntry] = []
    key: tuple[str, str, str] | None = None
    count, low, high = 0, 0, 0
    for entry in entries:
        this = _collapse_key(entry)
        if this is not None and this == key:
            index = _index(entry)
            count, low, high = count + 1, min(low, index), max(high, index)
            if count <= COLLAPSE_FROM:
                held.append(entry)
            continue
        yield from _flushed(held, key, count, low, high)
        held, key, count = [], this, 0
        if this is None:
            yield entry
        else:
            held, count, low, high = [entry], 1, _index(entry), _index(entry)
    yield from _flushed(held, key, count, low, high)


def _flushed(
    held: list[AuditEntry], key: tuple[str, str, str] | None, count: int, low: int, high: int
) -> list[AuditEntry]:
    if key is None or count < COLLAPSE_FROM:
        return held
    span = f"{low}..{high}" if low >= 0 else "..."  # keys a map_key named: no range
    label = f"{key[0]}[{span}] ({count:,} elements)"
    return [dataclasses.replace(held[0], task_key=label)]


def _collapse_key(entry: AuditEntry) -> tuple[str, str, str] | None:
    # The transition first: most entries take one that never collapses, and matching
    # the key against an element's form was a tenth of a big run's history.
    transition = "create" if entry.source is None else entry.transition
    if transition not in COLLAPSED:
        return None
    found = mapping.element_of(entry.task_key or "")
    return None if found is None else (found[0], transition, entry.actor)


def _index(entry: AuditEntry) -> int:
    """The element's index, from its key; -1 for a key a map_key named."""
    index = mapping.element_index(entry.task_key or "")
    return -1 if index is None else index
