"""The reaper reclaims a lease only once it has expired by the database's clock, on
both backends: a lease with seconds left is not reaped, however close its end."""

from __future__ import annotations

from flowforge.app.service import FlowForge
from tests.helpers import claim, one_task, task_id

#: A lease with seconds left when the reaper looks at once, yet over by a clock ten
#: seconds fast (the mutant this pins: the reaper's comparison shifted forward).
LEASE_S = 9.0


def test_a_lease_with_seconds_left_is_neither_listed_nor_reaped(app: FlowForge) -> None:
    run_id = app.start_workflow_run(one_task("t"))
    task = task_id(app, run_id, "t")
    won = claim(app, task, "w1", LEASE_S)

    assert task not in app.expired_leases()
    assert app.reap_expired_leases() == []
    assert not app.reclaim_task_run(task)
    row = app.get_task_run(task)
    assert (row.state, row.fencing_token, row.lease_owner) == ("running", won.fencing_token, "w1")
    assert app.finish_task_run(task, won.fencing_token, "succeed", {"ok": True})
