"""Concurrency limits' bookkeeping on both backends (docs/scheduling/limits.md, "What
is kept, and for how long"): the held row of a task cancelled while held goes with
the cancel."""

from __future__ import annotations

from uuid import UUID

import pytest

from flowforge.app.service import FlowForge
from tests.integration.test_limits import fan, ids


def held_row(app: FlowForge, task_run_id: UUID) -> bool:
    with app.store.read() as reads:
        return reads.held_dispatch(task_run_id) is not None


@pytest.mark.parametrize("cancel", ["the task", "its run"])
def test_a_held_task_cancelled_leaves_no_held_row(app: FlowForge, cancel: str) -> None:
    assert app.set_task_type_limit("slow", 1)
    run_id = app.start_workflow_run(fan(2))
    first, second = ids(app, run_id)
    assert app.claim_task_run(first, "w1") is not None
    assert app.claim_task_run(second, "w2") is None
    assert held_row(app, second)

    if cancel == "the task":
        assert app.transition_task_run(second, "cancel_ready")
    else:
        assert app.cancel_workflow_run(run_id)

    assert app.get_task_run(second).state == "cancelled"
    assert not held_row(app, second)
