"""The scheduler: advance_workflow_run and schedule_once, on both backends.

Workers are simulated by claiming and finishing through the application service, so
each test controls exactly which task succeeds or fails when. A finish of a running
run's task advances the run itself when it can (tests/integration/test_finish_advances.py);
these tests check what the run looks like after each step, whoever took it.
"""

from __future__ import annotations

import threading
from collections import Counter
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from tests.helpers import (
    states,
    succeed_leaving_a_mark,
    task_id,
    wait_until,
    wait_until_expired,
    work,
)

DIAMOND = {
    "name": "diamond",
    "retry": {"max_attempts": 1},
    "tasks": [
        {"key": "a", "type": "work"},
        {"key": "b", "type": "work", "depends_on": ["a"]},
        {"key": "c", "type": "work", "depends_on": ["a"]},
        {"key": "d", "type": "work", "depends_on": ["b", "c"]},
    ],
}
SINGLE = {"name": "single", "tasks": [{"key": "only", "type": "work"}]}
FAN = {
    "name": "fan",
    "retry": {"max_attempts": 3, "backoff_seconds": 0.05, "jitter": 0.0},
    "tasks": [
        {"key": "start", "type": "work"},
        *({"key": f"leaf{i}", "type": "work", "depends_on": ["start"]} for i in range(4)),
        {"key": "join", "type": "work", "depends_on": [f"leaf{i}" for i in range(4)]},
    ],
}


def test_a_diamond_promotes_each_task_once_its_dependencies_all_succeed(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    assert states(app, run_id) == {"a": "ready", "b": "pending", "c": "pending", "d": "pending"}
    first = app.advance_workflow_run(run_id)
    assert first.started and first.promoted == []
    work(app, run_id, "a")
    app.advance_workflow_run(run_id)
    assert states(app, run_id) == {"a": "succeeded", "b": "ready", "c": "ready", "d": "pending"}
    work(app, run_id, "b")
    app.advance_workflow_run(run_id)
    assert states(app, run_id)["d"] == "pending"  # d still waits for c
    work(app, run_id, "c")
    app.advance_workflow_run(run_id)
    assert states(app, run_id)["d"] == "ready"
    work(app, run_id, "d")
    app.advance_workflow_run(run_id)
    run = app.get_workflow_run(run_id)
    assert run.state == "succeeded"
    assert run.started_at is not None and run.finished_at is not None


def test_a_fan_out_retries_a_failed_leaf_with_backoff_and_then_fans_in(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FAN)
    app.advance_workflow_run(run_id)
    work(app, run_id, "start")
    app.advance_workflow_run(run_id)
    assert [states(app, run_id)[f"leaf{i}"] for i in range(4)] == ["ready"] * 4
    for i in range(4):
        work(app, run_id, f"leaf{i}", "fail" if i == 2 else "succeed")
    app.advance_workflow_run(run_id)
    leaf = app.get_task_run(task_id(app, run_id, "leaf2"))
    assert leaf.state == "retrying" and leaf.attempt == 2
    assert leaf.retry_due_at is not None and leaf.finished_at is None
    assert app.get_workflow_run(run_id).state == "running"  # attempts left: not a failure
    assert wait_until_made_ready(app, run_id) == ["leaf2"]
    assert states(app, run_id)["leaf2"] == "ready"
    work(app, run_id, "leaf2")
    app.advance_workflow_run(run_id)
    assert states(app, run_id)["join"] == "ready"
    work(app, run_id, "join")
    app.advance_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "succeeded"
    claims = [e for e in app.history(leaf.id) if e.transition == "claim"]
    assert [(e.attempt, e.fencing_token) for e in claims] == [(1, 1), (2, 2)]


def wait_until_made_ready(app: FlowForge, run_id: UUID) -> list[str]:
    """Advance (bounded) until the database clock passes a retry's due time."""
    return wait_until(
        lambda: app.advance_workflow_run(run_id).made_ready, 4.0, "a retry became due"
    )


def test_a_retry_is_not_made_ready_before_it_is_due(app: FlowForge) -> None:
    definition = {
        "name": "slow_retry",
        "retry": {"max_attempts": 2, "backoff_seconds": 3600, "backoff_cap_seconds": 3600},
        "tasks": [{"key": "only", "type": "work"}],
    }
    run_id = app.start_workflow_run(definition)
    work(app, run_id, "only", "fail")
    assert app.advance_workflow_run(run_id).retried == ["only"]
    assert app.advance_workflow_run(run_id).made_ready == []
    assert app.retry_ready(task_id(app, run_id, "only")) is False
    assert states(app, run_id) == {"only": "retrying"}


def test_a_failure_with_no_attempts_left_fails_the_run_and_cancels_what_is_left(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(FAN | {"retry": {"max_attempts": 1}})
    app.advance_workflow_run(run_id)
    work(app, run_id, "start")
    app.advance_workflow_run(run_id)
    running = app.claim_task_run(task_id(app, run_id, "leaf0"), "slow-worker", 30)
    assert running is not None
    work(app, run_id, "leaf1", "fail")
    result = app.advance_workflow_run(run_id)
    assert result.finished_as == "failed"
    final = states(app, run_id)
    assert final["leaf1"] == "failed"
    assert final["start"] == "succeeded"
    assert {final[k] for k in ("leaf0", "leaf2", "leaf3", "join")} == {"cancelled"}
    # The run's terminal state was fixed first; cancelling the leftovers kept it.
    assert app.get_workflow_run(run_id).state == "failed"
    # The slow worker's finish is now stale: its lease was cancelled under it.
    assert not app.finish_task_run(running.task_run_id, running.fencing_token, "succeed")


def test_cancelling_a_running_run_cancels_its_tasks_and_stays_cancelled(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    app.advance_workflow_run(run_id)
    claim = app.claim_task_run(task_id(app, run_id, "a"), "w", 30)
    assert claim is not None
    assert app.cancel_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "cancelled"
    assert set(states(app, run_id).values()) == {"cancelled"}
    assert not app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed")
    assert app.advance_workflow_run(run_id).finished_as is None
    assert app.cancel_workflow_run(run_id) is False  # idempotent: a second cancel is a no-op


def test_cancelling_a_pending_run_takes_the_before_start_edge(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    assert app.cancel_workflow_run(run_id)
    log = [e.transition for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"]
    assert log == ["create", "cancel_before_start"]
    assert set(states(app, run_id).values()) == {"cancelled"}


def work_leaving_a_mark(app: FlowForge, run_id: UUID, key: str) -> None:
    """:func:`work` a task to success, its run left to a scheduler."""
    claim = app.claim_task_run(task_id(app, run_id, key), "test-worker", 30)
    assert claim is not None, f"{key} was not claimable: {states(app, run_id)}"
    succeed_leaving_a_mark(app, claim.task_run_id, claim.fencing_token)


def test_schedule_once_reaps_promotes_and_finishes_across_runs(app: FlowForge) -> None:
    runs = [app.start_workflow_run(DIAMOND) for _ in range(3)]
    for run_id in runs:
        work_leaving_a_mark(app, run_id, "a")
    summary = app.schedule_once()
    assert summary.runs_advanced == 3
    assert summary.promoted == 6
    assert summary.runs_finished == 0
    assert app.schedule_once().promoted == 0


def test_schedule_once_reaps_an_expired_lease_and_the_reclaimed_task_then_finishes_the_run(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(SINGLE)
    app.advance_workflow_run(run_id)
    lost = app.claim_task_run(task_id(app, run_id, "only"), "crashed-worker", 0.05)
    assert lost is not None
    wait_until_expired(app, lost.task_run_id)  # the database's clock decides, not ours
    summary = app.schedule_once()
    assert summary.reaped == 1
    task = app.get_task_run(lost.task_run_id)
    assert (task.state, task.fencing_token, task.lease_owner) == ("ready", 2, None)
    assert not app.finish_task_run(lost.task_run_id, lost.fencing_token, "succeed")
    work(app, run_id, "only")  # the last task's finish also finishes its running run
    assert app.schedule_once().runs_finished == 0
    assert app.get_workflow_run(run_id).state == "succeeded"
    log = [e.transition for e in app.history(lost.task_run_id)]
    assert log == ["create", "claim", "reap_lease", "claim", "succeed"]


def test_advancing_an_unknown_run_is_a_clear_error(app: FlowForge) -> None:
    with pytest.raises(errors.UnknownRunError, match="no workflow run"):
        app.advance_workflow_run(UUID(int=7))


def test_two_schedulers_in_parallel_never_promote_or_retry_twice(pg_app: FlowForge) -> None:
    app = pg_app
    runs = [app.start_workflow_run(FAN) for _ in range(4)]
    for run_id in runs:
        app.advance_workflow_run(run_id)
        work(app, run_id, "start")
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def scheduler() -> None:
        try:
            barrier.wait()
            for _ in range(3):
                app.schedule_once()
        except BaseException as exc:  # re-raised in the main thread
            failures.append(exc)

    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for run_id in runs:
        edges = Counter((e.aggregate_id, e.transition) for e in app.run_history(run_id))
        assert max(edges.values()) == 1, edges
        assert Counter(t for (_, t) in edges)["dependencies_satisfied"] == 4
        assert Counter(t for (_, t) in edges)["start"] == 1
