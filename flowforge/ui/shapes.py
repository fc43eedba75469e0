"""A run's shape as drawn, kept per run: its tasks' definition order and its graph's
picture. A run's tasks and their dependencies never change (a mapped task's elements add
tasks: the count is part of the key), so a large run's shape (its definition read whole,
megabytes of JSON, and ``layout.picture``'s layers, crossings and lanes: most of a
50,000-task page's time) is computed once per UI process, not on every view and
reload. The first view of a large run pays it (docs/ui.md, "Large runs")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from flowforge.lru import Lru
from flowforge.ui import layout

#: How many runs' shapes a UI process keeps.
KEPT = 32


@dataclass(frozen=True, slots=True)
class Shape:
    #: Each task key's place in the run's definition (a mapped task's elements: absent).
    order: dict[str, int]
    #: ``layout.picture`` of its tasks (``None``: too large to draw).
    picture: layout.Picture | None


_shapes: Lru[tuple[UUID, int], Shape] = Lru(KEPT)
_lock = threading.Lock()


def of(run_id: UUID, count: int, build: Callable[[], Shape]) -> Shape:
    """The shape of run ``run_id`` with ``count`` tasks: ``build()`` once per run and size."""
    key = (run_id, count)
    with _lock:
        kept = _shapes.get(key)
    if kept is None:
        kept = build()
        with _lock:
            _shapes.put(key, kept)
    return kept
