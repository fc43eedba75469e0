"""A run's DAG as a picture: a layered layout (pure).

- **Layers**: a task's layer is one more than its deepest upstream task's (longest path;
  a task with no upstream is in layer 0). Layers are columns, left to right, so every
  edge goes from a lower layer to a higher one.
- **Groups**: a layer of more than :data:`GROUP_LAYER` tasks is drawn as one box,
  labelled with its tasks' type and count ("work", a multiplication sign, "9,998"), its
  state counts drawn by the page; edges to and from its tasks become one edge to or
  from the group.
- **Order**: within a layer, boxes are ordered to reduce crossings: barycentric sweeps
  (each box at the mean position of its neighbours in the layer before, then after),
  with a dummy node in every layer a long edge crosses, keeping the order with the
  fewest crossings (definition order first).
- **Wrapping**: a layer of more than :data:`MAX_ROWS` boxes wraps into several
  sub-columns side by side, so the picture's height is bounded (a 200-task fan-out is
  ten columns of twenty, not one column 11,000 px tall).
- **Routing**: every box sits on one grid of rows shared by all columns, so the gaps
  between rows and between columns are free lanes: an edge leaves its source's right
  side, runs in the gap after it to the lane above its target's row, along that lane to
  the gap before its target, and into its target's left side, where the page draws an
  arrowhead. No edge crosses a box.

A picture of more than :data:`MAX_BOXES` boxes or :data:`MAX_LAYERS` layers (a long
chain of 10,000 tasks) is not drawn (:func:`picture` returns ``None``); the page shows
:func:`grouped`'s table of layers instead.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flowforge.aggregates import dag

#: More tasks than this: a run's page reads its rows, not its audit log (``pages.py``).
GROUP_ABOVE = 200
#: A layer of more tasks than this is drawn as one group box.
GROUP_LAYER = 200
#: A layer of more boxes than this wraps into sub-columns: the picture's height bound.
MAX_ROWS = 20
#: More boxes or layers than these (after grouping): no picture, the table of layers.
MAX_BOXES = 1000
MAX_LAYERS = 80
#: Barycentric sweeps (each one down and one up) to order the layers.
SWEEPS = 4
#: More dummy nodes than this (long edges times the layers they cross): the long edges
#: are left out of the ordering, which stays quick on a dense graph.
MAX_DUMMIES = 20_000

#: A group's label: its tasks' type, this sign, their count.
TIMES = "\N{MULTIPLICATION SIGN}"

BOX_WIDTH = 150
BOX_HEIGHT = 40
#: The gap between two layers, and between two sub-columns of one wrapped layer.
COLUMN_GAP = 60
SUB_GAP = 24
ROW_GAP = 16
MARGIN = 10


@dataclass(frozen=True, slots=True)
class Task:
    """What the layout needs of a task (``aggregates.dag.Node``), and its type (the
    label of a group)."""

    key: str
    depends_on: Sequence[str]
    type: str = ""


@dataclass(frozen=True, slots=True)
class Box:
    """A task's box, or a group's (``members``: the keys of its tasks)."""

    key: str
    level: int
    x: int
    y: int
    members: tuple[str, ...] = ()
    label: str = ""

    @property
    def is_group(self) -> bool:
        return bool(self.members)


@dataclass(frozen=True, slots=True)
class Edge:
    """From box ``source`` (its right side) to box ``target`` (its left side), through
    ``points`` (axis-parallel segments, the last one horizontal into the target)."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]

    @property
    def path(self) -> str:
        """The SVG path's ``d``."""
        return "M" + " L".join(f"{x:g} {y:g}" for x, y in self.points)


@dataclass(frozen=True, slots=True)
class Picture:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int
    #: Each layer's boxes, in their drawn order (keys): what the ordering chose.
    order: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Level:
    """One dependency level of a grouped run: its task count per state."""

    level: int
    tasks: int
    states: dict[str, int]


def levels(tasks: Sequence[Task]) -> dict[str, int]:
    """Each task's dependency level, in the definition's topological order. Tasks on a
    cycle (never in a valid definition) are left out; unknown dependencies are ignored."""
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


def group_key(level: int) -> str:
    """A group box's key: no task key starts with a space."""
    return f" level {level}"


def _nodes(tasks: Sequence[Task]) -> tuple[list[list[str]], dict[str, Box], set[tuple[str, str]]]:
    """The layers' node keys (a group for a wide layer), the group boxes' members, and
    the edges between nodes (deduplicated)."""
    cols = columns(tasks)
    node_of: dict[str, str] = {}
    groups: dict[str, Box] = {}
    layers: list[list[str]] = []
    types = {t.key: t.type for t in tasks}
    for lvl, keys in enumerate(cols):
        if len(keys) > GROUP_LAYER:
            key = group_key(lvl)
            kinds = Counter(types[k] for k in keys)
            kind = kinds.most_common(1)[0][0] if len(kinds) == 1 and kinds else "tasks"
            label = f"{kind or 'tasks'} {TIMES}{len(keys):,}"
            groups[key] = Box(key, lvl, 0, 0, tuple(keys), label)
            node_of.update(dict.fromkeys(keys, key))
            layers.append([key])
        else:
            node_of.update({k: k for k in keys})
            layers.append(list(keys))
    edges = {
        (node_of[d], node_of[t.key])
        for t in tasks
        if t.key in node_of
        for d in t.depends_on
        if d in node_of
    }
    return layers, groups, edges


def order(layers: list[list[str]], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Each layer's nodes ordered to reduce crossings (barycentric sweeps over the
    layers with dummy nodes for long edges); the dummies are left out of the answer."""
    layer_of = {k: i for i, keys in enumerate(layers) for k in keys}
    work = [list(keys) for keys in layers]
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    dummies = sum(layer_of[v] - layer_of[u] - 1 for u, v in edges)
    for n, (u, v) in enumerate(sorted(edges)):
        if dummies > MAX_DUMMIES and layer_of[v] - layer_of[u] > 1:
            continue
        chain = [u] + [f"\0{n}:{i}" for i in range(layer_of[u] + 1, layer_of[v])] + [v]
        for i, dummy in enumerate(chain[1:-1], start=layer_of[u] + 1):
            work[i].append(dummy)
        for a, b in itertools.pairwise(chain):
            succ.setdefault(a, []).append(b)
            pred.setdefault(b, []).append(a)
    best, fewest = [list(k) for k in work], _crossings(work, succ)
    for sweep in range(2 * SWEEPS):
        down = sweep % 2 == 0
        indices = range(1, len(work)) if down else range(len(work) - 2, -1, -1)
        for i in indices:
            near = work[i - 1] if down else work[i + 1]
            place = {k: p for p, k in enumerate(near)}

            work[i] = _by_barycentre(work[i], place, pred if down else succ)
        count = _crossings(work, succ)
        if count < fewest:
            best, fewest = [list(k) for k in work], count
    return [[k for k in keys if not k.startswith("\0")] for keys in best]


def _by_barycentre(
    keys: list[str], place: dict[str, int], links: dict[str, list[str]]
) -> list[str]:
    """``keys`` sorted by the mean place of their neighbours (``links``) in the layer
    beside, a key without any keeping its own place; ties in their current order."""

    def weight(p: int, key: str) -> float:
        found = [place[k] for k in links.get(key, ()) if k in place]
        return sum(found) / len(found) if found else float(p)

    return [k for _, k in sorted(enumerate(keys), key=lambda it: (weight(*it), it[0]))]


def _crossings(work: list[list[str]], succ: dict[str, list[str]]) -> int:
    """How many pairs of edges cross between adjacent layers (inversions, counted with a
    Fenwick tree)."""
    total = 0
    for i in range(len(work) - 1):
        below = {k: p for p, k in enumerate(work[i + 1])}
        ends = sorted(
            (p, below[v]) for p, u in enumerate(work[i]) for v in succ.get(u, ()) if v in below
        )
        tree = [0] * (len(work[i + 1]) + 1)
        for seen, (_, b) in enumerate(ends):
            j, not_greater = b + 1, 0
            while j > 0:
                not_greater += tree[j]
                j -= j & -j
            total += seen - not_greater
            j = b + 1
            while j < len(tree):
                tree[j] += 1
                j += j & -j
    return total


def picture(tasks: Sequence[Task]) -> Picture | None:
    """Where each box goes and how each edge runs; ``None`` if too large to draw."""
    layers, groups, edges = _nodes(tasks)
    if len(layers) > MAX_LAYERS or sum(map(len, layers)) > MAX_BOXES:
        return None
    ordered = order(layers, edges)
    rows_of = [min(len(keys), MAX_ROWS) for keys in ordered]
    tallest = max(rows_of, default=0)
    boxes: dict[str, Box] = {}
    sub_of: dict[str, tuple[int, int]] = {}  # key -> (its sub-column, its layer's count)
    x = MARGIN
    for lvl, keys in enumerate(ordered):
        subs = -(-len(keys) // MAX_ROWS)
        rows = -(-len(keys) // subs) if subs else 0
        top = (tallest - rows) // 2  # a short layer centred on the shared grid of rows
        for j, key in enumerate(keys):
            sub, row = divmod(j, rows)
            bx = x + sub * (BOX_WIDTH + SUB_GAP)
            by = MARGIN + (top + row) * (BOX_HEIGHT + ROW_GAP)
            group = groups.get(key)
            members, label = (group.members, group.label) if group else ((), "")
            boxes[key] = Box(key, lvl, bx, by, members, label)
            sub_of[key] = (sub, subs)
        x += subs * BOX_WIDTH + max(0, subs - 1) * SUB_GAP + COLUMN_GAP
    routed = [_route(boxes[u], boxes[v], sub_of[u], sub_of[v]) for u, v in sorted(edges)]
    return Picture(
        boxes=list(boxes.values()),
        edges=routed,
        width=x - COLUMN_GAP + MARGIN,
        height=2 * MARGIN + tallest * (BOX_HEIGHT + ROW_GAP) - ROW_GAP,
        order=ordered,
    )


def _route(u: Box, v: Box, u_sub: tuple[int, int], v_sub: tuple[int, int]) -> Edge:
    """``u`` to ``v`` through the free lanes between columns and rows."""
    after = COLUMN_GAP if u_sub[0] == u_sub[1] - 1 else SUB_GAP
    before = COLUMN_GAP if v_sub[0] == 0 else SUB_GAP
    x1, y1 = float(u.x + BOX_WIDTH), u.y + BOX_HEIGHT / 2
    x2, y2 = float(v.x), v.y + BOX_HEIGHT / 2
    points: tuple[tuple[float, float], ...]
    out, into = x1 + after / 2, x2 - before / 2
    if out == into:  # adjacent columns: one vertical run in the gap between them
        points = ((x1, y1), (out, y1), (out, y2), (x2, y2))
    else:
        lane = v.y - ROW_GAP / 2  # the free lane above the target's row
        points = ((x1, y1), (out, y1), (out, lane), (into, lane), (into, y2), (x2, y2))
    return Edge(u.key, v.key, tuple(p for i, p in enumerate(points) if p not in points[:i]))


def grouped(tasks: Sequence[Task], states: Mapping[str, str]) -> list[Level]:
    """Each level's task count per state (``states``: each task's state by key)."""
    found: dict[int, Counter[str]] = {}
    for key, lvl in levels(tasks).items():
        found.setdefault(lvl, Counter())[states.get(key, "none")] += 1
    return [
        Level(lvl, sum(counts.values()), dict(sorted(counts.items())))
        for lvl, counts in sorted(found.items())
    ]
