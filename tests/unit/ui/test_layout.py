"""The DAG's layout by dependency level, and a large run's grouping (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowforge.ui import layout
from flowforge.ui.layout import Task

DIAMOND = [
    Task("extract", []),
    Task("clean", ["extract"]),
    Task("enrich", ["extract"]),
    Task("load", ["clean", "enrich"]),
]


def test_a_task_is_one_level_below_its_deepest_upstream_task() -> None:
    deep = [*DIAMOND, Task("report", ["extract", "load"])]
    assert layout.levels(deep) == {"extract": 0, "clean": 1, "enrich": 1, "load": 2, "report": 3}


def test_each_level_is_a_column_in_definition_order() -> None:
    assert layout.columns(DIAMOND) == [["extract"], ["clean", "enrich"], ["load"]]


def test_boxes_are_placed_by_level_and_edges_join_them() -> None:
    picture = layout.picture(DIAMOND)
    where = {b.key: (b.x, b.y) for b in picture.boxes}
    assert where["clean"][0] == where["enrich"][0] > where["extract"][0]
    assert where["clean"][1] < where["enrich"][1]
    assert len(picture.edges) == 4
    assert all(e.x1 < e.x2 for e in picture.edges)  # every edge points downstream
    assert picture.width >= max(b.x for b in picture.boxes) + layout.BOX_WIDTH
    assert picture.height >= max(b.y for b in picture.boxes) + layout.BOX_HEIGHT


def test_a_grouped_run_counts_each_levels_tasks_by_state() -> None:
    states = {"extract": "succeeded", "clean": "running", "enrich": "ready"}
    assert layout.grouped(DIAMOND, states) == [
        layout.Level(0, 1, {"succeeded": 1}),
        layout.Level(1, 2, {"ready": 1, "running": 1}),
        layout.Level(2, 1, {"none": 1}),  # not created yet as of the moment shown
    ]


@st.composite
def dags(draw: st.DrawFn) -> list[Task]:
    """Random DAGs: each task depends on some of the tasks before it."""
    n = draw(st.integers(1, 30))
    return [
        Task(f"t{i}", [f"t{j}" for j in sorted(draw(st.sets(st.integers(0, i - 1))))] if i else [])
        for i in range(n)
    ]


@given(dags())
def test_every_task_is_below_each_of_its_upstream_tasks(tasks: list[Task]) -> None:
    level = layout.levels(tasks)
    assert set(level) == {t.key for t in tasks}
    for task in tasks:
        assert all(level[task.key] > level[d] for d in task.depends_on)
        if task.depends_on:  # and right below the deepest: no level is left empty
            assert level[task.key] == 1 + max(level[d] for d in task.depends_on)
        else:
            assert level[task.key] == 0
    boxes = {(b.x, b.y) for b in layout.picture(tasks).boxes}
    assert len(boxes) == len(tasks)  # no two boxes overlap
