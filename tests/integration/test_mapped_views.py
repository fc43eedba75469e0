"""How a run with a mapped task (issue 46) reads, on both backends: an element waiting
for its retry counted as retrying (not failed) in the grouped line, and `why --at`
of a mapped task and of its elements."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.app import why
from flowforge.app.service import FlowForge
from flowforge.cli import mapped_lines
from tests.helpers import task_id
from tests.integration.test_mapped_tasks import LEASE_S, mapped_workflow, succeed_list_files


def retrying_workflow() -> dict[str, Any]:
    """list_files -> process (mapped) -> reduce; 2 attempts each, the retry far off."""
    return mapped_workflow(retry={"max_attempts": 2, "backoff_seconds": 600.0, "jitter": 0.0})


def finish(app: FlowForge, run_id: UUID, key: str, outcome: str) -> None:
    """Claim ``key`` and finish its attempt (``succeed`` or ``fail``), as a worker does."""
    claim = app.claim_task_run(task_id(app, run_id, key), "w", LEASE_S)
    assert claim is not None
    error = {"type": "RuntimeError", "message": "broke"} if outcome == "fail" else None
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, outcome, 1, error)


def moment(app: FlowForge) -> datetime:
    """The database's now, once its clock has moved past it (SQLite's has milliseconds):
    what was written before is at or before it, what is written after is after it."""
    now = app.database_now()
    while app.database_now() <= now:
        pass
    return now


def test_an_element_failed_with_attempts_left_counts_as_retrying_not_failed(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(retrying_workflow())
    assert succeed_list_files(app, run_id, [1, 2, 3])
    finish(app, run_id, "process[1]", "fail")
    element = next(t for t in app.task_runs(run_id) if t.task_key == "process[1]")
    assert element.state == "failed"  # its retry not scheduled yet: no scheduler passed

    (view,) = app.mapped_tasks(app.get_workflow_run(run_id))

    assert view.counts == {"ready": 2, "retrying": 1}
    assert view.state == "retrying"
    assert mapped_lines.view_line(view) == "process[0..2]: 2 ready, 1 retrying"
    _, groups = mapped_lines.split(app.task_runs(run_id))
    assert mapped_lines.group_line("process", groups["process"]) == (
        "process[0..2]: 2 ready, 1 retrying"
    )


def test_why_at_a_past_moment_knows_the_mapped_task_then_and_each_element(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(retrying_workflow())
    before_the_list = moment(app)
    assert succeed_list_files(app, run_id, [1, 2, 3])
    expanded = moment(app)
    finish(app, run_id, "process[0]", "succeed")
    finish(app, run_id, "process[1]", "fail")
    later = moment(app)
    finish(app, run_id, "process[2]", "succeed")  # after every moment asked about
    reduce, element = task_id(app, run_id, "reduce"), task_id(app, run_id, "process[1]")

    waiting = why.why(app, reduce, before_the_list)
    assert waiting.reason == "waiting_for_mapped_task"
    assert "process is not expanded yet: it waits for list_files" in waiting.headline
    assert "3 ready" in why.why(app, reduce, expanded).headline
    then = why.why(app, reduce, later)
    assert then.reason == "waiting_for_mapped_task"
    assert "process[0..2]: 1 ready, 1 retrying, 1 succeeded" in then.headline

    (view,) = why.mapped_tasks_as_of(app, run_id, ["process"], before_the_list).values()
    assert (view.elements, view.state) == (None, "pending")
    (view,) = why.mapped_tasks_as_of(app, run_id, ["process"], later).values()
    assert (view.elements, view.counts) == (3, {"succeeded": 1, "retrying": 1, "ready": 1})

    unborn = why.why(app, element, before_the_list)
    assert unborn.reason == "not_created"
    assert "process was not expanded yet" in unborn.headline
    explained = why.why(app, element, later)
    assert any("element 1 of 3 of the mapped task process" in d for d in explained.details)


def test_a_runs_counts_take_a_mapped_task_as_pending_until_it_expands(app: FlowForge) -> None:
    run_id = app.start_workflow_run(retrying_workflow())
    assert app.run_task_counts(app.get_workflow_run(run_id)) == {"ready": 1, "pending": 2}
    assert succeed_list_files(app, run_id, [1, 2, 3])
    counts = app.run_task_counts(app.get_workflow_run(run_id))
    assert counts == {"succeeded": 1, "ready": 3, "pending": 1}

    empty = app.start_workflow_run(retrying_workflow())
    assert succeed_list_files(app, empty, [])
    # No element and nothing left to expand: the reducer is promoted, nothing pending.
    assert app.run_task_counts(app.get_workflow_run(empty)) == {"succeeded": 1, "ready": 1}
