"""The waiting line is `why`'s headline, worked out on a real database: a run whose
first task is ready with its dispatch still in the outbox (no publisher is running)."""

from __future__ import annotations

from flowforge.app.service import FlowForge
from flowforge.app.why import why
from flowforge.cli.waiting import QUIET_S, Waiting
from tests.helpers import one_task


def test_a_still_run_waits_for_what_why_says_of_its_ready_task(app: FlowForge) -> None:
    run_id = app.start_workflow_run(one_task("extract"))
    seconds = [0.0]
    waiting = Waiting(lambda task_run_id: why(app, task_run_id), clock=lambda: seconds[0])
    assert waiting.update(app.get_workflow_run(run_id), app.task_runs(run_id)) is None
    seconds[0] += QUIET_S
    wait = waiting.update(app.get_workflow_run(run_id), app.task_runs(run_id))
    assert wait is not None
    assert wait.key == ("extract", "dispatch_pending")
    assert wait.text.startswith(
        "waiting: extract is ready; its dispatch is waiting in the outbox since "
    )
