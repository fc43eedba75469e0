"""The dependency graph of a workflow's tasks: its problems, its order, its cycles.

Pure functions over any sequence of tasks with a ``key`` and ``depends_on`` (the
definition's models are one), so the algorithms are tested without building models.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol


class Node(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def depends_on(self) -> Sequence[str]: ...


def keys(tasks: Sequence[Node]) -> str:
    """The distinct keys, comma-separated, in definition order (for messages)."""
    return ", ".join(dict.fromkeys(t.key for t in tasks))


def problems(tasks: Sequence[Node]) -> list[str]:
    """Every cross-task problem (duplicate keys, unknown dependencies, one cycle), each
    naming its field path, so a user fixes a file in one round."""
    first_at: dict[str, int] = {}
    problems = []
    for i, task in enumerate(tasks):
        if task.key in first_at:
            problems.append(
                f"tasks[{i}].key: duplicate task key {task.key!r} "
                f"(also tasks[{first_at[task.key]}].key)"
            )
        first_at.setdefault(task.key, i)
    for i, task in enumerate(tasks):
        problems.extend(
            f"tasks[{i}].depends_on: unknown dependency {dependency!r} of task "
            f"{task.key!r} (known: {keys(tasks)})"
            for dependency in task.depends_on
            if dependency not in first_at
        )
    # With duplicate keys an edge's end is ambiguous; the cycle check waits for the fix.
    if len(first_at) == len(tasks) and (found := cycle(tasks)):
        path = " -> ".join(tasks[i].key for i in (*found, found[0]))
        problems.append(
            f"tasks[{found[0]}].depends_on: dependency cycle {path} "
            "(each task depends on the next)"
        )
    return problems


def kahn_order(tasks: Sequence[Node]) -> list[int]:
    """Indexes of the tasks in dependency order; tasks on or behind a cycle are left
    out. Unknown dependencies are ignored (they are reported separately)."""
    index = {task.key: i for i, task in enumerate(tasks)}
    waiting = [0] * len(tasks)
    dependents: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for dependency in task.depends_on:
            if dependency in index:
                waiting[i] += 1
                dependents[index[dependency]].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]  # sorted: a valid heap
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order


def cycle(tasks: Sequence[Node]) -> list[int]:
    """One dependency cycle (task indexes, each depending on the next), or ``[]``.

    Every task Kahn's algorithm could not order has a dependency it could not order
    either, so walking such dependencies must come back to a task already visited.
    The cycle starts at its earliest-defined task, so the message is deterministic.
    """
    stuck = set(range(len(tasks))) - set(kahn_order(tasks))
    if not stuck:
        return []
    index = {task.key: i for i, task in enumerate(tasks)}
    visited: dict[int, int] = {}  # task index -> position in the walk
    walk: list[int] = []
    node = min(stuck)
    while node not in visited:
        visited[node] = len(walk)
        walk.append(node)
        node = next(index[d] for d in tasks[node].depends_on if index.get(d) in stuck)
    cycle = walk[visited[node] :]
    start = cycle.index(min(cycle))
    return cycle[start:] + cycle[:start]
