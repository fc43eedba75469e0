"""The DAG's layered layout, and a large run's grouping (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge.ui import layout
from flowforge.ui.layout import Box, Picture, Task

DIAMOND = [
    Task("extract", []),
    Task("clean", ["extract"]),
    Task("enrich", ["extract"]),
    Task("load", ["clean", "enrich"]),
]


def fan_out(n: int, kind: str = "process") -> list[Task]:
    """A root, ``n`` tasks after it, and one task after them all."""
    middle = [Task(f"t{i}", ["root"], kind) for i in range(n)]
    return [Task("root", []), *middle, Task("end", [t.key for t in middle])]


def drawn(tasks: list[Task]) -> Picture:
    found = layout.picture(tasks)
    assert found is not None
    return found


def test_a_task_is_one_level_below_its_deepest_upstream_task() -> None:
    deep = [*DIAMOND, Task("report", ["extract", "load"])]
    assert layout.levels(deep) == {"extract": 0, "clean": 1, "enrich": 1, "load": 2, "report": 3}


def test_each_level_is_a_column_in_definition_order() -> None:
    assert layout.columns(DIAMOND) == [["extract"], ["clean", "enrich"], ["load"]]


def test_boxes_are_placed_by_level_and_edges_join_them() -> None:
    picture = drawn(DIAMOND)
    where = {b.key: (b.x, b.y) for b in picture.boxes}
    assert where["clean"][0] == where["enrich"][0] > where["extract"][0]
    assert where["clean"][1] < where["enrich"][1]
    assert len(picture.edges) == 4
    for edge in picture.edges:  # from the source's right side into the target's left
        (x1, _), (x2, _) = edge.points[0], edge.points[-1]
        assert x1 == where[edge.source][0] + layout.BOX_WIDTH
        assert x2 == where[edge.target][0]
        assert edge.points[-2][1] == edge.points[-1][1]  # the last run is horizontal
    assert picture.width >= max(b.x for b in picture.boxes) + layout.BOX_WIDTH
    assert picture.height >= max(b.y for b in picture.boxes) + layout.BOX_HEIGHT


def test_the_order_within_a_layer_removes_a_crossing() -> None:
    # Defined so that x (after b) comes before y (after a): drawn in that order their
    # edges would cross; the barycentric order puts y first.
    tasks = [Task("a", []), Task("b", []), Task("x", ["b"]), Task("y", ["a"])]
    assert drawn(tasks).order == [["a", "b"], ["y", "x"]]


def test_a_long_edge_pulls_its_target_beside_its_source() -> None:
    # "late" depends on "a" (two layers up) and on "m2" (one up); "m1" on "b" only.
    tasks = [
        Task("a", []),
        Task("b", []),
        Task("m1", ["b"]),
        Task("m2", ["a"]),
        Task("late", ["a", "m2"]),
        Task("other", ["m1"]),
    ]
    order = drawn(tasks).order
    assert order[1] == ["m2", "m1"] and order[2] == ["late", "other"]


def test_a_200_task_fan_out_wraps_its_wide_layer_and_stays_short() -> None:
    picture = drawn(fan_out(198))
    assert len(picture.boxes) == 200  # every task its own box: readable, not grouped
    assert picture.height <= 1200  # 198 boxes in one column would be 11,000 px
    middle = [b for b in picture.boxes if b.level == 1]
    assert len({b.x for b in middle}) == 10  # ten sub-columns of at most twenty
    assert max(sum(b.x == x for b in middle) for x in {b.x for b in middle}) <= layout.MAX_ROWS
    assert_no_overlap(picture)
    assert_edges_avoid_boxes(picture)


def test_a_layer_of_10000_tasks_is_one_group_box() -> None:
    picture = drawn(fan_out(9_998))
    assert [b.key for b in picture.boxes if not b.is_group] == ["root", "end"]
    (group,) = [b for b in picture.boxes if b.is_group]
    assert group.label == "process \N{MULTIPLICATION SIGN}9,998" and len(group.members) == 9_998
    assert {(e.source, e.target) for e in picture.edges} == {
        ("root", group.key),
        (group.key, "end"),
    }


def test_a_chain_too_long_to_draw_has_no_picture() -> None:
    chain = [Task("t0", [])] + [Task(f"t{i}", [f"t{i - 1}"]) for i in range(1, 200)]
    assert layout.picture(chain) is None  # the page shows its table of levels


def test_a_grouped_run_counts_each_levels_tasks_by_state() -> None:
    states = {"extract": "succeeded", "clean": "running", "enrich": "ready"}
    assert layout.grouped(DIAMOND, states) == [
        layout.Level(0, 1, {"succeeded": 1}),
        layout.Level(1, 2, {"ready": 1, "running": 1}),
        layout.Level(2, 1, {"none": 1}),  # not created yet as of the moment shown
    ]


def _inside(box: Box, x: float, y: float) -> bool:
    return box.x < x < box.x + layout.BOX_WIDTH and box.y < y < box.y + layout.BOX_HEIGHT


def assert_no_overlap(picture: Picture) -> None:
    boxes = picture.boxes
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart_x = a.x + layout.BOX_WIDTH <= b.x or b.x + layout.BOX_WIDTH <= a.x
            apart_y = a.y + layout.BOX_HEIGHT <= b.y or b.y + layout.BOX_HEIGHT <= a.y
            assert apart_x or apart_y, (a, b)


def assert_edges_avoid_boxes(picture: Picture) -> None:
    """No segment of an edge runs through a box's inside (axis-parallel segments)."""
    for edge in picture.edges:
        for (x1, y1), (x2, y2) in zip(edge.points, edge.points[1:], strict=False):
            assert x1 == x2 or y1 == y2, edge
            for box in picture.boxes:
                left, right = box.x, box.x + layout.BOX_WIDTH
                top, bottom = box.y, box.y + layout.BOX_HEIGHT
                crosses_x = min(x1, x2) < right and max(x1, x2) > left
                crosses_y = min(y1, y2) < bottom and max(y1, y2) > top
                if x1 == x2:
                    assert not (left < x1 < right and crosses_y), (edge, box)
                else:
                    assert not (top < y1 < bottom and crosses_x), (edge, box)


@st.composite
def dags(draw: st.DrawFn) -> list[Task]:
    """Random DAGs: each task depends on some of the tasks before it."""
    n = draw(st.integers(1, 45))
    return [
        Task(f"t{i}", [f"t{j}" for j in sorted(draw(st.sets(st.integers(0, i - 1), max_size=4)))])
        if i
        else Task("t0", [])
        for i in range(n)
    ]


@settings(deadline=None)
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


@st.composite
def wide_dags(draw: st.DrawFn) -> list[Task]:
    """Wide DAGs: up to 90 tasks after a few roots, so that layers wrap."""
    roots = [Task(f"r{i}", []) for i in range(draw(st.integers(1, 3)))]
    n = draw(st.integers(1, 90))
    keys = [r.key for r in roots]
    return roots + [
        Task(f"w{i}", sorted(draw(st.sets(st.sampled_from(keys), min_size=1)))) for i in range(n)
    ]


@settings(deadline=None)
@given(st.one_of(dags(), wide_dags()))
def test_no_two_boxes_overlap_and_every_edge_goes_to_a_higher_layer(tasks: list[Task]) -> None:
    picture = drawn(tasks)
    assert sorted(b.key for b in picture.boxes) == sorted(t.key for t in tasks)
    assert_no_overlap(picture)
    assert_edges_avoid_boxes(picture)
    box = {b.key: b for b in picture.boxes}
    assert len(picture.edges) == sum(len(t.depends_on) for t in tasks)
    for edge in picture.edges:
        assert box[edge.source].level < box[edge.target].level
        assert edge.points[0][0] < edge.points[-1][0]  # drawn left to right
    assert all(b.x + layout.BOX_WIDTH <= picture.width for b in picture.boxes)
    assert all(b.y + layout.BOX_HEIGHT <= picture.height for b in picture.boxes)


def test_a_dense_graph_of_200_tasks_is_laid_out_quickly_without_overlaps() -> None:
    # 200 tasks in 50 layers, each after every task of the layers before: ~15,000 long
    # edges crossing up to 48 layers, past MAX_DUMMIES; ordered by its short edges only.
    tasks = [Task(f"t{i}", [f"t{j}" for j in range(i - i % 4)]) for i in range(200)]
    picture = drawn(tasks)
    assert len(picture.boxes) == 200 and len(picture.order) == 50
    assert_no_overlap(picture)
