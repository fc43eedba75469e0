"""A worker's finish advances its own run, in its own transaction, when it safely can
(``advance.advance_after_finish``), on both backends; otherwise it marks the run for a
scheduler, as every other transition does.

The finish of a success promotes the task's dependents and succeeds the run after its
last task, without a scheduler's round, starting the run first if its claim could not;
it leaves to the scheduler a run whose row another transaction holds, and every
failure. Fan-in
stays exact under racing finishes (Barrier): the dependent is promoted once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from tests.helpers import (
    forge_event,
    marks,
    one_task,
    race,
    run_edges,
    run_row_held,
    states,
    task_id,
)
from tests.integration.test_scheduler import DIAMOND

ACTOR = "worker-7"
ONE = one_task("t")
FLAKY = {
    "name": "flaky",
    "retry": {"max_attempts": 2, "backoff_seconds": 60, "jitter": 0.0},
    "tasks": [{"key": "t", "type": "work"}],
}
FAN_IN_ROUNDS = 10


def started(app: FlowForge, definition: Mapping[str, Any]) -> UUID:
    run_id = app.start_workflow_run(definition)
    assert app.advance_workflow_run(run_id).started
    return run_id


def claimed(app: FlowForge, run_id: UUID, key: str) -> tuple[UUID, int]:
    claim = app.claim_task_run(task_id(app, run_id, key), "w", 30)
    assert claim is not None, f"{key} not claimable: {states(app, run_id)}"
    return claim.task_run_id, claim.fencing_token


def finish(app: FlowForge, task: tuple[UUID, int], outcome: str = "succeed") -> bool:
    error = {"type": "Boom", "message": "boom"} if outcome == "fail" else None
    return app.finish_task_run(*task, outcome, error=error, actor=ACTOR)


def test_a_finish_promotes_its_dependents_and_dispatches_them_in_its_transaction(
    app: FlowForge,
) -> None:
    run_id = started(app, DIAMOND)
    assert finish(app, claimed(app, run_id, "a"))
    assert states(app, run_id) == {"a": "succeeded", "b": "ready", "c": "ready", "d": "pending"}
    assert marks(app) == 0  # nothing left for a scheduler
    for key in ("b", "c"):
        promoted = app.get_task_run(task_id(app, run_id, key))
        (dispatch,) = app.dispatches_of(promoted.id)
        assert dispatch.fencing_token == promoted.fencing_token
        last = app.history(promoted.id)[-1]
        assert (last.transition, last.actor) == ("dependencies_satisfied", ACTOR)


def test_the_last_finish_succeeds_the_run(app: FlowForge) -> None:
    run_id = started(app, ONE)
    assert finish(app, claimed(app, run_id, "t"))
    run = app.get_workflow_run(run_id)
    assert (run.state, marks(app)) == ("succeeded", 0)
    assert run.finished_at is not None
    assert app.advance_workflow_run(run_id).finished_as is None  # nothing left to do


def test_a_claim_starts_its_run_and_a_finish_then_advances_it(app: FlowForge) -> None:
    # A root task is ready (and dispatched) from its run's creation, which marks
    # nothing: its first claim starts the run, no scheduler.
    run_id = app.start_workflow_run(DIAMOND)
    assert (app.get_workflow_run(run_id).state, marks(app)) == ("pending", 0)
    task = claimed(app, run_id, "a")
    run = app.get_workflow_run(run_id)
    assert run.state == "running" and run.started_at is not None
    assert finish(app, task)
    assert states(app, run_id) == {"a": "succeeded", "b": "ready", "c": "ready", "d": "pending"}
    assert run_edges(app, run_id) == [("create", "user"), ("start", "w")]
    assert marks(app) == 0


def test_a_finish_in_a_run_its_claim_could_not_start_starts_it_and_advances_it(
    pg_app: FlowForge,
) -> None:
    run_id = pg_app.start_workflow_run(DIAMOND)
    with run_row_held(pg_app, run_id):
        task = claimed(pg_app, run_id, "a")
    assert finish(pg_app, task)
    assert states(pg_app, run_id) == {
        "a": "succeeded",
        "b": "ready",
        "c": "ready",
        "d": "pending",
    }
    run = pg_app.get_workflow_run(run_id)
    assert run.state == "running" and run.started_at is not None
    assert run_edges(pg_app, run_id) == [("create", "user"), ("start", ACTOR)]
    assert marks(pg_app) == 0  # nothing left for a scheduler


def test_the_only_task_finishing_before_its_run_started_starts_and_succeeds_the_run(
    pg_app: FlowForge,
) -> None:
    run_id = pg_app.start_workflow_run(ONE)
    with run_row_held(pg_app, run_id):
        task = claimed(pg_app, run_id, "t")
    assert finish(pg_app, task)
    run = pg_app.get_workflow_run(run_id)
    assert run.state == "succeeded"
    assert run.started_at is not None and run.finished_at is not None
    assert run_edges(pg_app, run_id) == [
        ("create", "user"),
        ("start", ACTOR),
        ("succeed", ACTOR),
    ]
    assert marks(pg_app) == 0


def test_a_failure_for_good_is_marked_and_the_scheduler_fails_the_run(app: FlowForge) -> None:
    run_id = started(app, DIAMOND)
    assert finish(app, claimed(app, run_id, "a"), "fail")
    assert (app.get_workflow_run(run_id).state, marks(app)) == ("running", 1)
    assert app.advance_woken_runs().runs_finished == 1
    assert app.get_workflow_run(run_id).state == "failed"
    assert set(states(app, run_id).values()) == {"failed", "cancelled"}


def test_a_failure_with_attempts_left_is_left_to_the_scheduler_to_retry(app: FlowForge) -> None:
    run_id = started(app, FLAKY)
    assert finish(app, claimed(app, run_id, "t"), "fail")
    assert (app.get_task_run(task_id(app, run_id, "t")).state, marks(app)) == ("failed", 1)
    assert app.advance_woken_runs().retried == 1  # its own transaction, its own time
    task = app.get_task_run(task_id(app, run_id, "t"))
    assert (task.state, task.attempt) == ("retrying", 2)
    assert app.seconds_to_next_timer() is not None


def finish_a_while_the_run_row_is_held(app: FlowForge, postgres_url: str, run_id: UUID) -> None:
    """Finish task a while another connection holds the run's row, as an advance of the
    run that is mid-way does: the finish cannot advance the run."""
    a = claimed(app, run_id, "a")
    with psycopg.connect(postgres_url) as holder:
        holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (run_id,))
        assert finish(app, a)  # returns at once: SKIP LOCKED, never a wait


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
@pytest.mark.parametrize("whole_run_mark", [False, True], ids=["task mark", "whole-run mark"])
def test_a_finish_whose_run_row_is_held_marks_it_without_waiting(
    app: FlowForge, postgres_url: str, whole_run_mark: bool
) -> None:
    run_id = started(app, DIAMOND)
    finish_a_while_the_run_row_is_held(app, postgres_url, run_id)
    assert (states(app, run_id)["b"], marks(app)) == ("pending", 1)
    if whole_run_mark:  # a running run with such a mark is advanced in full
        as_whole_run_marks(app, run_id)
    assert app.advance_woken_runs().promoted == 2
    assert states(app, run_id) == {"a": "succeeded", "b": "ready", "c": "ready", "d": "pending"}


def test_racing_finishes_into_one_fan_in_promote_it_exactly_once(app: FlowForge) -> None:
    for _ in range(FAN_IN_ROUNDS):
        run_id = started(app, DIAMOND)
        assert finish(app, claimed(app, run_id, "a"))
        b, c = claimed(app, run_id, "b"), claimed(app, run_id, "c")
        finishes = [lambda task=task: finish(app, task) for task in (b, c)]
        assert race(*finishes) == [True, True]
        # Whichever finish took the run's lock second saw both, or marked the run.
        app.advance_woken_runs()
        assert states(app, run_id)["d"] == "ready"
        d = task_id(app, run_id, "d")
        promotions = [e for e in app.history(d) if e.transition == "dependencies_satisfied"]
        assert len(promotions) == 1
        assert len(app.dispatches_of(d)) == 1
        assert finish(app, claimed(app, run_id, "d"))
        assert app.get_workflow_run(run_id).state == "succeeded"
    assert marks(app) == 0


def as_whole_run_marks(app: FlowForge, run_id: UUID) -> None:
    """Replace the run's marks with one that names no task, as a mark written before
    marks named tasks (migration 3 marked every active run so) or a user's edge does."""
    with app.store.write() as writes:
        assert writes.marks.clear(run_id)
        writes.marks.mark(run_id)


def test_a_whole_run_mark_on_a_run_whose_tasks_moved_before_its_start_advances_it_all(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    # A failure before any start: a mark only (a failure never advances its run).
    assert finish(app, claimed(app, run_id, "a"), "fail")
    as_whole_run_marks(app, run_id)
    summary = app.advance_woken_runs()
    assert (app.get_workflow_run(run_id).state, summary.runs_finished) == ("failed", 1)
    assert states(app, run_id) == {
        "a": "failed",
        "b": "cancelled",
        "c": "cancelled",
        "d": "cancelled",
    }


def test_a_promotion_is_dispatched_in_its_transaction_and_undone_with_it(app: FlowForge) -> None:
    """The outbox row of a task made ready is written in the transaction that made it
    ready, never in one of its own: when the finish's transaction fails after the
    first promotion (the second one's event version is taken), neither the promotion
    nor its dispatch is left."""
    run_id = started(app, DIAMOND)
    a = claimed(app, run_id, "a")
    # The advance promotes the dependents in the order of their ids.
    first, second = sorted(task_id(app, run_id, key) for key in ("b", "c"))
    forge_event(app.store, second, 2)
    pending = app.pending_dispatch_count()
    with pytest.raises(errors.PersistenceError):
        finish(app, a)
    assert app.dispatches_of(first) == []
    assert app.pending_dispatch_count() == pending
    assert states(app, run_id) == {"a": "running", "b": "pending", "c": "pending", "d": "pending"}
    assert app.get_task_run(first).version == 1
