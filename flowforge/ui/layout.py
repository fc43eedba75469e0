"""A run's DAG as a picture: its tasks laid out by dependency level (pure).

A task's level is one more than its deepest upstream task's (a task with no upstream is
at level 0); each level is a column, its tasks in definition order. A run of more than
:data:`GROUP_ABOVE` tasks is drawn one box per level, with counts per state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flowforge.aggregates import dag

#: More tasks than this and the DAG is drawn grouped by level, never one box per task.
GROUP_ABOVE = 200

BOX_WIDTH = 150
BOX_HEIGHT = 40
COLUMN_GAP = 60
ROW_GAP = 16
MARGIN = 10


@dataclass(frozen=True, slots=True)
class Task:
    """What the layout needs of a task (``aggregates.dag.Node``)."""

    key: str
    depends_on: Sequence[str]


@dataclass(frozen=True, slots=True)
class Box:
    key: str
    level: int
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True, slots=True)
class Picture:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Level:
    """One dependency level of a grouped run: its task count per state."""

    level: int
    tasks: int
    states: dict[str, int]


def levels(tasks: Sequence[Task]) -> dict[str, int]:
    """Each task's dependency level, in the definition's topological order. Tasks on a
    cycle (never in a valid definition) or with unknown dependencies are left out of it
    or ignore the unknown ones."""
    level: dict[str, int] = {}
    for i in dag.kahn_order(tasks):
        task = tasks[i]
        level[task.key] = 1 + max((level[d] for d in task.depends_on if d in level), default=-1)
    return level


def columns(tasks: Sequence[Task]) -> list[list[str]]:
    """The task keys of each level, level 0 first, each in definition order."""
    level = levels(tasks)
    found: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for task in tasks:
        if task.key in level:
            found[level[task.key]].append(task.key)
    return found


def picture(tasks: Sequence[Task]) -> Picture:
    """Where each task's box goes, and an edge from each upstream box to its dependent."""
    boxes: dict[str, Box] = {}
    cols = columns(tasks)
    for lvl, keys in enumerate(cols):
        for row, key in enumerate(keys):
            x = MARGIN + lvl * (BOX_WIDTH + COLUMN_GAP)
            boxes[key] = Box(key, lvl, x, MARGIN + row * (BOX_HEIGHT + ROW_GAP))
    edges = [
        Edge(
            up.x + BOX_WIDTH,
            up.y + BOX_HEIGHT // 2,
            boxes[t.key].x,
            boxes[t.key].y + BOX_HEIGHT // 2,
        )
        for t in tasks
        if t.key in boxes
        for d in t.depends_on
        if (up := boxes.get(d)) is not None
    ]
    tallest = max((len(keys) for keys in cols), default=0)
    return Picture(
        boxes=list(boxes.values()),
        edges=edges,
        width=2 * MARGIN + len(cols) * (BOX_WIDTH + COLUMN_GAP),
        height=2 * MARGIN + tallest * (BOX_HEIGHT + ROW_GAP),
    )


def grouped(tasks: Sequence[Task], states: Mapping[str, str]) -> list[Level]:
    """Each level's task count per state (``states``: each task's state by key)."""
    found: dict[int, Counter[str]] = {}
    for key, lvl in levels(tasks).items():
        found.setdefault(lvl, Counter())[states.get(key, "none")] += 1
    return [
        Level(lvl, sum(counts.values()), dict(sorted(counts.items())))
        for lvl, counts in sorted(found.items())
    ]
