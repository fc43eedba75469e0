"""A run that ends, ends every unfinished task in the same transaction (docs/execution-
model.md, "A run ends whole"), on both backends, with no scheduler pass after it.

Each run below has a task of every unfinished kind: ``retrying`` (its retry an hour
away), ``failed`` with attempts left, ``running``, ``ready`` and ``pending``. Races are
released by one ``threading.Barrier``; nothing sleeps to widen a window.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.projections.writes.tasks import TaskWrites
from tests.helpers import claim, race, states, task_id, work

#: Retries an hour away: a retrying task is not due while a test runs.
LATER = {"max_attempts": 3, "backoff_seconds": 3600.0, "backoff_cap_seconds": 3600.0}
LEFTOVERS = {
    "name": "leftovers",
    "retry": LATER,
    "tasks": [
        {"key": "retrying", "type": "work"},
        {"key": "failed", "type": "work"},
        {"key": "running", "type": "work"},
        {"key": "ready", "type": "work"},
        {"key": "pending", "type": "work", "depends_on": ["ready"]},
        {"key": "doomed", "type": "work", "retry": {"max_attempts": 1}},
    ],
}
#: The edge that ends each leftover, by its key.
ENDED_BY = {
    "retrying": "cancel_retrying",
    "failed": "cancel_failed",
    "running": "cancel_running",
    "ready": "cancel_ready",
    "pending": "cancel_pending",
}
ROUNDS = 8


def run_with_leftovers(app: FlowForge) -> tuple[UUID, int]:
    """A running run with one task of each unfinished kind (``doomed`` still ready);
    the running task's fencing token."""
    run_id = app.start_workflow_run(LEFTOVERS)
    work(app, run_id, "retrying", "fail")
    app.advance_workflow_run(run_id)  # schedules its retry, an hour away
    work(app, run_id, "failed", "fail")  # no pass since: failed, attempts left
    running = claim(app, task_id(app, run_id, "running"), "worker-1")
    assert states(app, run_id) == {
        "retrying": "retrying",
        "failed": "failed",
        "running": "running",
        "ready": "ready",
        "pending": "pending",
        "doomed": "ready",
    }
    return run_id, running.fencing_token


def looks_alive(app: FlowForge, run_id: UUID) -> dict[str, str]:
    """The tasks of the run that look as if they may still run."""
    return {
        t.task_key: t.state
        for t in app.task_runs(run_id)
        if t.state not in ("succeeded", "cancelled")
        and not (t.state == "failed" and t.attempt >= t.max_attempts)
    }


def last_transition(app: FlowForge, run_id: UUID, key: str) -> str:
    return app.history(task_id(app, run_id, key))[-1].transition


def test_a_cancelled_run_ends_its_retrying_and_failed_tasks_in_its_own_transaction(
    app: FlowForge,
) -> None:
    run_id, _ = run_with_leftovers(app)
    assert app.cancel_workflow_run(run_id) is True
    assert set(states(app, run_id).values()) == {"cancelled"}  # no scheduler pass ran
    for key, edge in ENDED_BY.items():
        assert last_transition(app, run_id, key) == edge
    # One event each: no retry made ready only to be cancelled.
    assert [e.transition for e in app.history(task_id(app, run_id, "retrying"))][-2:] == [
        "schedule_retry",
        "cancel_retrying",
    ]


def test_a_failed_run_ends_every_unfinished_task_but_keeps_the_one_that_failed_it(
    app: FlowForge,
) -> None:
    run_id, _ = run_with_leftovers(app)
    work(app, run_id, "doomed", "fail")
    result = app.advance_workflow_run(run_id)
    assert result.finished_as == "failed"
    assert app.get_workflow_run(run_id).state == "failed"
    assert looks_alive(app, run_id) == {}
    assert states(app, run_id)["doomed"] == "failed"  # why the run failed: kept
    assert last_transition(app, run_id, "retrying") == "cancel_retrying"


def test_every_cancel_of_a_run_and_its_tasks_has_the_one_time_of_its_transaction(
    pg_app: FlowForge,
) -> None:
    run_id, _ = run_with_leftovers(pg_app)
    assert pg_app.cancel_workflow_run(run_id)
    run_end = pg_app.run_history(run_id)
    ends = {e.at for e in run_end if e.transition in (*ENDED_BY.values(), "cancel")}
    assert len(ends) == 1, ends  # PostgreSQL's now(): one per transaction


def test_a_cancel_that_fails_after_the_runs_own_edge_writes_nothing(
    app: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = run_with_leftovers(app)
    before = {t.task_key: (t.state, t.version) for t in app.task_runs(run_id)}
    events_before = len(app.run_history(run_id))
    move = TaskWrites.move

    def fails_on_the_third_leftover(self: TaskWrites, *args: Any, **kwargs: Any) -> Any:
        moved.append(args)
        if len(moved) == 3:
            raise errors.TransactionConflictError("injected: the database failed here")
        return move(self, *args, **kwargs)

    moved: list[Any] = []
    monkeypatch.setattr(TaskWrites, "move", fails_on_the_third_leftover)
    with pytest.raises(errors.TransactionConflictError, match="injected"):
        app.cancel_workflow_run(run_id)
    monkeypatch.undo()
    assert len(moved) == 3  # the run's own edge and three leftovers were written first
    assert app.get_workflow_run(run_id).state == "running"
    assert {t.task_key: (t.state, t.version) for t in app.task_runs(run_id)} == before
    assert len(app.run_history(run_id)) == events_before


def test_a_leftover_that_fails_while_its_run_ends_is_cancelled_as_it_now_is(
    pg_app: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's failing finish commits after the cancel took the run's row, before
    it locks the run's tasks: the locking read returns the row as the finish left it
    (failed, a lock waited for if the finish had not committed yet), and it is cancelled
    as failed, in the same transaction."""
    run_id, token = run_with_leftovers(pg_app)
    running = task_id(pg_app, run_id, "running")
    lock_tasks = TaskWrites.lock_unfinished_of_run

    def the_worker_fails_then_lock(self: TaskWrites, run: UUID) -> Any:
        # Another connection, another transaction: a failure does not try the run's row,
        # which this transaction holds.
        assert pg_app.finish_task_run(running, token, "fail", error={"type": "E", "message": "x"})
        return lock_tasks(self, run)

    monkeypatch.setattr(TaskWrites, "lock_unfinished_of_run", the_worker_fails_then_lock)
    assert pg_app.cancel_workflow_run(run_id)
    monkeypatch.undo()
    assert looks_alive(pg_app, run_id) == {}
    assert [e.transition for e in pg_app.history(running)][-2:] == ["fail", "cancel_failed"]


def test_a_cancel_raced_by_a_failing_worker_and_a_scheduler_leaves_nothing_alive(
    app: FlowForge,
) -> None:
    for _ in range(ROUNDS):
        run_id, token = run_with_leftovers(app)
        running = task_id(app, run_id, "running")
        error = {"type": "RuntimeError", "message": "boom"}
        cancelled, _, _ = race(
            partial(app.cancel_workflow_run, run_id),
            partial(app.finish_task_run, running, token, "fail", error=error),
            partial(app.advance_workflow_run, run_id),
        )
        assert cancelled is True  # the run was running: the cancel always wins
        assert app.get_workflow_run(run_id).state == "cancelled"
        assert looks_alive(app, run_id) == {}, states(app, run_id)
