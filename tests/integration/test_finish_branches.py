"""A task failed for good, under each ``on_failure`` policy, on both backends
(docs/execution-model.md, "When a task fails for good"): what is cancelled and why, when
the run fails, that no finish leaves a finished run without a scheduler's wake-up, and a
rerun from the failed task.

Two independent branches, ``a1 -> a2`` and ``b1 -> b2 -> b3``, and a lone ``c1``; one
attempt each. Races are released by one ``threading.Barrier`` (``tests.helpers.race``).
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import UUID

import pytest

from flowforge.app.service import FlowForge
from flowforge.app.why import why
from tests.helpers import claim, race, states, task_id, work

ROUNDS = 6


def branches(**fields: Any) -> dict[str, Any]:
    return {
        "name": "branches",
        "retry": {"max_attempts": 1},
        **fields,
        "tasks": [
            {"key": "a1", "type": "work"},
            {"key": "a2", "type": "work", "depends_on": ["a1"]},
            {"key": "b1", "type": "work"},
            {"key": "b2", "type": "work", "depends_on": ["b1"]},
            {"key": "b3", "type": "work", "depends_on": ["b2"]},
            {"key": "c1", "type": "work"},
        ],
    }


FINISH_BRANCHES = branches(on_failure="finish_branches")
FAIL_FAST = branches()


def b1_fails_while_a1_runs(app: FlowForge, definition: dict[str, Any]) -> tuple[UUID, int]:
    """A run whose c1 succeeded, a1 running, b1 failed for good and the run advanced
    after it; a1's fencing token."""
    run_id = app.start_workflow_run(definition)
    work(app, run_id, "c1")
    a1 = claim(app, task_id(app, run_id, "a1"), "worker-a")
    work(app, run_id, "b1", "fail")
    app.advance_workflow_run(run_id)
    return run_id, a1.fencing_token


def headline(app: FlowForge, run_id: UUID, key: str) -> tuple[str, str]:
    explanation = why(app, task_id(app, run_id, key))
    return explanation.reason, explanation.headline


def marked(app: FlowForge, run_id: UUID) -> bool:
    """Whether the run is marked for a scheduler (a wake-up waits for it)."""
    with app.store.read() as reads:
        return run_id in reads.woken_runs(10_000)


def settle(app: FlowForge, run_id: UUID) -> str:
    """The run's state once a scheduler has advanced it, after asserting that a run
    not yet ended is marked for one (no lost wake-up)."""
    if app.get_workflow_run(run_id).state == "running":
        assert marked(app, run_id), f"a running run with no mark: {states(app, run_id)}"
    app.advance_workflow_run(run_id)
    return app.get_workflow_run(run_id).state


def test_under_fail_fast_why_says_an_independent_task_was_cancelled_because_of_the_policy(
    app: FlowForge,
) -> None:
    run_id, _ = b1_fails_while_a1_runs(app, FAIL_FAST)
    assert app.get_workflow_run(run_id).state == "failed"
    assert states(app, run_id)["a1"] == "cancelled"
    reason, text = headline(app, run_id, "a1")
    assert reason == "cancelled"
    assert "when b1 failed for good (fail-fast" in text
    assert "depend on it" in text and "which it depends on" not in text
    reason, text = headline(app, run_id, "b3")
    assert reason == "cancelled"
    assert "b1, which it depends on, failed for good" in text


def test_under_finish_branches_only_the_dependants_are_cancelled_and_the_run_goes_on(
    app: FlowForge,
) -> None:
    run_id, token = b1_fails_while_a1_runs(app, FINISH_BRANCHES)
    assert app.get_workflow_run(run_id).state == "running"
    assert states(app, run_id) == {
        "a1": "running",
        "a2": "pending",
        "b1": "failed",
        "b2": "cancelled",
        "b3": "cancelled",
        "c1": "succeeded",
    }
    for key in ("b2", "b3"):
        reason, text = headline(app, run_id, key)
        assert reason == "upstream_failed", text
        assert f"{key} was cancelled" in text and "b1, which it depends on" in text
    assert "finish_branches" in " ".join(why(app, task_id(app, run_id, "b1")).details)
    assert app.finish_task_run(task_id(app, run_id, "a1"), token, "succeed")
    app.advance_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "running"  # a2 still to run
    work(app, run_id, "a2")
    assert settle(app, run_id) == "failed"
    assert states(app, run_id)["a2"] == "succeeded"
    reason, text = headline(app, run_id, "a2")
    assert reason == "succeeded", text
    reason, text = headline(app, run_id, "b2")
    assert reason == "upstream_failed", text


def test_a_run_whose_last_branch_ends_in_its_own_finish_is_failed_or_marked(
    app: FlowForge,
) -> None:
    """The finish of a leaf (a2), alone: its run's completion check counts the failed
    b1 as unfinished, so the finish must leave a mark (or fail the run) itself."""
    run_id, token = b1_fails_while_a1_runs(app, FINISH_BRANCHES)
    assert app.finish_task_run(task_id(app, run_id, "a1"), token, "succeed")
    app.advance_workflow_run(run_id)
    app.advance_workflow_run(run_id)  # nothing left to do, no mark left behind
    work(app, run_id, "a2")
    assert settle(app, run_id) == "failed"


def test_two_last_branches_finishing_at_once_leave_the_run_failed_or_marked(
    app: FlowForge,
) -> None:
    definition = branches(on_failure="finish_branches")
    definition["tasks"] = [t for t in definition["tasks"] if t["key"] != "a2"]
    for _ in range(ROUNDS):
        run_id = app.start_workflow_run(definition)
        a1 = claim(app, task_id(app, run_id, "a1"), "worker-a")
        c1 = claim(app, task_id(app, run_id, "c1"), "worker-c")
        work(app, run_id, "b1", "fail")
        app.advance_workflow_run(run_id)
        race(
            partial(app.finish_task_run, a1.task_run_id, a1.fencing_token, "succeed"),
            partial(app.finish_task_run, c1.task_run_id, c1.fencing_token, "succeed"),
        )
        assert settle(app, run_id) == "failed"


def test_a_last_finish_raced_with_an_advance_never_leaves_the_run_running_unmarked(
    app: FlowForge,
) -> None:
    for _ in range(ROUNDS):
        run_id, token = b1_fails_while_a1_runs(app, FINISH_BRANCHES)
        assert app.finish_task_run(task_id(app, run_id, "a1"), token, "succeed")
        app.advance_workflow_run(run_id)
        a2 = claim(app, task_id(app, run_id, "a2"), "worker-a")
        race(
            partial(app.finish_task_run, a2.task_run_id, a2.fencing_token, "succeed"),
            partial(app.advance_workflow_run, run_id),
        )
        assert settle(app, run_id) == "failed"


@pytest.mark.parametrize("definition", [FAIL_FAST, FINISH_BRANCHES], ids=["fail_fast", "branches"])
def test_a_rerun_from_the_failed_task_runs_it_and_its_dependants_to_success(
    app: FlowForge, definition: dict[str, Any]
) -> None:
    run_id, token = b1_fails_while_a1_runs(app, definition)
    if app.get_workflow_run(run_id).state == "running":
        assert app.finish_task_run(task_id(app, run_id, "a1"), token, "succeed")
        app.advance_workflow_run(run_id)
        work(app, run_id, "a2")
        app.advance_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "failed"
    rerun = app.rerun_workflow_run(run_id, from_tasks=["b1"]).run_id
    for key in ("b1", "b2", "b3"):
        if states(app, rerun)[key] != "ready":
            app.advance_workflow_run(rerun)
        work(app, rerun, key)
    for key in ("a1", "a2"):  # whatever did not succeed before runs now (fail-fast's a1)
        if states(app, rerun)[key] != "succeeded":
            app.advance_workflow_run(rerun)
            work(app, rerun, key)
    app.advance_workflow_run(rerun)
    assert app.get_workflow_run(rerun).state == "succeeded", states(app, rerun)
