"""A wide fan-in (a task that depends on more than ``fan_in.WIDE`` others): each finish
of one of its dependencies costs its own, not the fan-in's width (app/fan_in.py), and
the dependent is promoted by the last one's finish, exactly as a narrow one is.

The cost is shown by what a finish sends PostgreSQL: no read of the run's task rows by
key (the dependent and its every dependency), which the finish made before (a read of
N rows and N keys sent, for each of the N finishes).
"""

from __future__ import annotations

from uuid import UUID

from flowforge.app import fan_in
from flowforge.app.service import FlowForge
from tests.helpers import RoundTrip, marks, states, task_id

ACTOR = "worker-7"
WIDTH = fan_in.WIDE + 6
MIDDLE = [f"t{i}" for i in range(WIDTH)]
WIDE_FAN_IN = {
    "name": "wide",
    "tasks": [
        {"key": "root", "type": "work"},
        *({"key": key, "type": "work", "depends_on": ["root"]} for key in MIDDLE),
        {"key": "end", "type": "work", "depends_on": MIDDLE},
    ],
}
#: The statement that reads task rows by key (common.sql, select_task_runs_by_keys).
ROWS_BY_KEY = b"task_key IN ("


def finish(app: FlowForge, run_id: UUID, key: str) -> None:
    claim = app.claim_task_run(task_id(app, run_id, key), "w", 30)
    assert claim is not None, f"{key} not claimable: {states(app, run_id)}"
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed", actor=ACTOR)


def started(app: FlowForge) -> UUID:
    run_id = app.start_workflow_run(WIDE_FAN_IN)
    assert app.advance_workflow_run(run_id).started
    finish(app, run_id, "root")
    return run_id


def test_the_last_dependency_s_finish_promotes_a_wide_fan_in(app: FlowForge) -> None:
    run_id = started(app)
    for key in reversed(MIDDLE[1:]):
        finish(app, run_id, key)
        assert states(app, run_id)["end"] == "pending"
    assert marks(app) == 0
    finish(app, run_id, MIDDLE[0])
    assert states(app, run_id)["end"] == "ready"
    last = app.history(task_id(app, run_id, "end"))[-1]
    assert (last.transition, last.actor) == ("dependencies_satisfied", ACTOR)


def test_a_finish_into_a_waiting_wide_fan_in_reads_no_task_rows_by_key(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    run_id = started(pg_app)
    claim = pg_app.claim_task_run(task_id(pg_app, run_id, "t3"), "w", 30)
    assert claim is not None
    round_trips.clear()
    assert pg_app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed", actor=ACTOR)
    assert round_trips
    assert not [t for t in round_trips if ROWS_BY_KEY.lower() in t.text.lower()]
