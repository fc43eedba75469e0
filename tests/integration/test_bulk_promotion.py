"""A fan-out's dependants are promoted at once (``TaskWrites.promote``), on both backends:
on PostgreSQL in one statement that also writes each task's event, dispatch and mark;
elsewhere one conditional write each. Either way each promoted task has exactly what a
single promotion gives it, and a task that is no longer pending is not promoted.
"""

from __future__ import annotations

from flowforge.app.service import FlowForge
from flowforge.projections.writes.edges import SUCCEED_TASK
from tests.helpers import states, task_id, work

WIDTH = 6
FAN_OUT = {
    "name": "fan",
    "tasks": [
        {"key": "root", "type": "noop"},
        *({"key": f"t{i}", "type": "noop", "depends_on": ["root"]} for i in range(WIDTH)),
    ],
}
DEPENDANTS = [f"t{i}" for i in range(WIDTH)]


def test_each_dependant_of_a_fan_out_is_promoted_once_with_its_event_and_dispatch(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(FAN_OUT)
    work(app, run_id, "root")
    assert {key: states(app, run_id)[key] for key in DEPENDANTS} == dict.fromkeys(
        DEPENDANTS, "ready"
    )
    history = app.run_history(run_id)
    for key in DEPENDANTS:
        promotions = [
            e for e in history if e.task_key == key and e.transition == "dependencies_satisfied"
        ]
        assert [(e.source, e.target, e.version) for e in promotions] == [("pending", "ready", 2)]
        with app.store.read() as reads:
            dispatches = reads.dispatches_of(task_id(app, run_id, key))
        assert [(d.task_key, d.fencing_token) for d in dispatches] == [(key, 0)]


def test_a_task_no_longer_pending_is_left_alone_and_not_returned(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FAN_OUT)
    work(app, run_id, "root")  # promotes every dependant
    with app.store.write() as writes:
        rows = [row for row in writes.task_runs_of(run_id) if row.task_key in DEPENDANTS]
        again = writes.tasks.promote(rows, actor="test")
    assert again == {}
    with app.store.read() as reads:
        dispatches = [reads.dispatches_of(row.id) for row in rows]
    assert [len(each) for each in dispatches] == [1] * WIDTH


def test_the_promoted_rows_are_the_rows_as_written(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FAN_OUT)
    root = task_id(app, run_id, "root")
    claim = app.claim_task_run(root, "w", 30)
    assert claim is not None
    with app.store.write() as writes:
        writes.runs.lock(run_id)
        assert writes.tasks.finish(root, SUCCEED_TASK, claim.fencing_token, actor="w")
        pending = [row for row in writes.task_runs_of(run_id) if row.task_key in DEPENDANTS]
        promoted = writes.tasks.promote(pending, actor="test")
    with app.store.read() as reads:
        written = {row.id: row for row in reads.task_runs_of(run_id)}
    assert len(promoted) == WIDTH
    assert promoted == {row_id: written[row_id] for row_id in promoted}
