"""New runs, task runs and dispatches get time-ordered ids (UUIDv7, aggregates/ids.py),
on both backends: later rows' ids sort after earlier ones', so their index entries go
to the right-hand edge of each B-tree (docs/architecture.md, "Ids")."""

from __future__ import annotations

from flowforge.app.service import FlowForge
from tests.helpers import one_task

ONE = one_task("t")


def test_runs_task_runs_and_dispatches_get_uuid7_ids_in_creation_order(
    app: FlowForge,
) -> None:
    runs = [app.start_workflow_run(ONE) for _ in range(3)]
    runs += app.start_workflow_runs(ONE, [{}, {}])
    tasks = [task.id for run_id in runs for task in app.task_runs(run_id)]
    dispatches = [d.dispatch_id for task_id in tasks for d in app.dispatches_of(task_id)]
    assert len(dispatches) == len(tasks) == len(runs) == 5
    for ids in (runs, tasks, dispatches):
        assert {made.version for made in ids} == {7}
        times = [made.int >> 80 for made in ids]  # a UUIDv7's milliseconds
        assert times == sorted(times)
