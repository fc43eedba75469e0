"""A leaf's success in one round trip (``LeafWrites.succeed``, PostgreSQL only).

A worker's success of a task no other task depends on sends the finish and everything
that can follow it (the run started if its claim could not, the run succeeded after its
last task, the run's mark for a scheduler unless settled) with the ``COMMIT``, each guarded
in SQL by what Python would have checked between round trips: that the finish won and
that this transaction holds the run's row. These tests pin each guard, against the
general path's outcome (``advance.advance_after_finish``, whose tests are in
``test_finish_advances.py``), and count the round trips.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge.app.service import FlowForge
from tests.helpers import (
    RoundTrip,
    marks,
    one_task,
    race,
    run_edges,
    run_row_held,
    wait_until_expired,
)

pytestmark = pytest.mark.postgres

ACTOR = "worker-leaf"
TWO_LEAVES = {
    "name": "two_leaves",
    "retry": {"max_attempts": 1},
    "tasks": [{"key": "a", "type": "work"}, {"key": "b", "type": "work"}],
}
RACE_ROUNDS = 10
TINY_LEASE_S = 0.05


def claimed_by_a_worker(app: FlowForge, run_id: UUID, key: str) -> tuple[UUID, int]:
    """Claim a task as the worker does: the claim returns the run, whose definition the
    worker parses (so the finish knows the task is a leaf without a read)."""
    task = next(t for t in app.task_runs(run_id) if t.task_key == key)
    row, run = app.claim_task_run_and_its_run(task.id, "w")
    assert row is not None and run is not None
    app.definitions.of(run)
    return row.id, row.fencing_token


def succeed(app: FlowForge, task: tuple[UUID, int]) -> bool:
    return app.finish_task_run(*task, "succeed", {"ok": True}, actor=ACTOR)


def agrees_with_its_events(app: FlowForge, run_id: UUID) -> None:
    """The run's row, and each of its tasks' rows, is what its events say (the events
    the statements built in SQL): a row written without its event is not."""
    row = app.get_workflow_run(run_id)
    aggregate = app.workflow_run_aggregate(run_id)
    assert (aggregate.state.value, aggregate.version) == (row.state, row.version)
    assert (aggregate.started_at, aggregate.finished_at) == (row.started_at, row.finished_at)
    for task in app.task_runs(run_id):
        snapshot = app.task_run_aggregate(task.id).snapshot()
        columns = dataclasses.asdict(task)
        assert {k: columns[k] for k in snapshot} == snapshot, task.task_key


def recorded_success(app: FlowForge, task: tuple[UUID, int], result: Any, actor: str) -> None:
    """The task's own log ends in its success, as the audit log shows it: the result,
    the claim's fencing token and the actor, at the row's version."""
    task_run_id, fencing_token = task
    *_, last = app.history(task_run_id)
    assert (last.transition, last.source, last.target) == ("succeed", "running", "succeeded")
    assert (last.result, last.fencing_token, last.actor) == (result, fencing_token, actor)
    assert last.version == app.get_task_run(task_run_id).version


def test_the_last_leaf_succeeds_its_running_run_in_one_round_trip(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    run_id = pg_app.start_workflow_run(TWO_LEAVES)
    assert pg_app.advance_workflow_run(run_id).started
    a, b = claimed_by_a_worker(pg_app, run_id, "a"), claimed_by_a_worker(pg_app, run_id, "b")
    round_trips.clear()
    assert succeed(pg_app, a)
    assert len(round_trips) == 1 and round_trips[0].committed
    recorded_success(pg_app, a, {"ok": True}, ACTOR)
    # A task still to finish: the run stays running and nobody is woken for it.
    assert (pg_app.get_workflow_run(run_id).state, marks(pg_app)) == ("running", 0)
    round_trips.clear()
    assert succeed(pg_app, b)
    assert len(round_trips) == 1
    recorded_success(pg_app, b, {"ok": True}, ACTOR)
    assert (pg_app.get_workflow_run(run_id).state, marks(pg_app)) == ("succeeded", 0)
    assert run_edges(pg_app, run_id)[-1] == ("succeed", ACTOR)
    agrees_with_its_events(pg_app, run_id)


def test_a_leaf_of_a_run_its_claim_could_not_start_starts_and_succeeds_it(
    pg_app: FlowForge,
) -> None:
    run_id = pg_app.start_workflow_run(one_task("t", "w"))
    with run_row_held(pg_app, run_id):
        task = claimed_by_a_worker(pg_app, run_id, "t")
    assert pg_app.get_workflow_run(run_id).state == "pending"
    assert succeed(pg_app, task)
    recorded_success(pg_app, task, {"ok": True}, ACTOR)
    assert run_edges(pg_app, run_id) == [("create", "user"), ("start", ACTOR), ("succeed", ACTOR)]
    agrees_with_its_events(pg_app, run_id)
    assert marks(pg_app) == 0  # settled: nobody to wake


def test_a_leaf_of_a_run_its_claim_started_succeeds_it(pg_app: FlowForge) -> None:
    run_id = pg_app.start_workflow_run(one_task("t", "w"))
    task = claimed_by_a_worker(pg_app, run_id, "t")
    assert succeed(pg_app, task)
    recorded_success(pg_app, task, {"ok": True}, ACTOR)
    assert run_edges(pg_app, run_id) == [("create", "user"), ("start", "w"), ("succeed", ACTOR)]
    agrees_with_its_events(pg_app, run_id)
    assert marks(pg_app) == 0


def test_a_leaf_whose_run_row_is_held_only_marks_the_run(
    pg_app: FlowForge, postgres_url: str
) -> None:
    run_id = pg_app.start_workflow_run(TWO_LEAVES)
    assert pg_app.advance_workflow_run(run_id).started
    a, b = claimed_by_a_worker(pg_app, run_id, "a"), claimed_by_a_worker(pg_app, run_id, "b")
    assert succeed(pg_app, a)
    with psycopg.connect(postgres_url) as holder:
        holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (run_id,))
        assert succeed(pg_app, b)  # at once: SKIP LOCKED, never a wait
    assert (pg_app.get_workflow_run(run_id).state, marks(pg_app)) == ("running", 1)
    assert pg_app.advance_woken_runs().runs_finished == 1
    assert pg_app.get_workflow_run(run_id).state == "succeeded"
    assert run_edges(pg_app, run_id)[-1] == ("succeed", "scheduler")


def test_a_leaf_finish_that_loses_writes_nothing_and_marks_nothing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    run_id = pg_app.start_workflow_run(one_task("t", "w"))
    assert pg_app.advance_workflow_run(run_id).started  # parses its definition here
    task = next(iter(pg_app.task_runs(run_id))).id
    stale = pg_app.claim_task_run(task, "w1", TINY_LEASE_S)
    assert stale is not None
    # Its lease runs out, the reaper reclaims the task and another worker succeeds it,
    # while the run row is held: that finish can only mark the run. The run is now
    # running with every task succeeded, which a guard-less statement would settle.
    wait_until_expired(pg_app, task)
    assert pg_app.reclaim_task_run(task)
    pg_app.advance_woken_runs()  # the reclaim's mark
    with psycopg.connect(postgres_url) as holder:
        holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (run_id,))
        assert succeed(pg_app, claimed_by_a_worker(pg_app, run_id, "t"))
    before = (pg_app.get_workflow_run(run_id), marks(pg_app))
    assert before[0].state == "running" and before[1] == 1
    assert not succeed(pg_app, (task, stale.fencing_token))
    assert (pg_app.get_workflow_run(run_id), marks(pg_app)) == before
    assert pg_app.advance_woken_runs().runs_finished == 1


def test_a_leaf_beside_a_cancelled_task_marks_the_run_for_the_scheduler(pg_app: FlowForge) -> None:
    run_id = pg_app.start_workflow_run(TWO_LEAVES)
    assert pg_app.advance_workflow_run(run_id).started
    a = claimed_by_a_worker(pg_app, run_id, "a")
    b = next(t.id for t in pg_app.task_runs(run_id) if t.task_key == "b")
    assert pg_app.transition_task_run(b, "cancel_ready")
    before = marks(pg_app)
    assert succeed(pg_app, a)
    # Every task is done but not every one succeeded: only the full advance judges it.
    assert (pg_app.get_workflow_run(run_id).state, marks(pg_app)) == ("running", before + 1)
    pg_app.advance_woken_runs()
    assert pg_app.get_workflow_run(run_id).state == "cancelled"


def test_racing_last_leaves_succeed_their_run_exactly_once(pg_app: FlowForge) -> None:
    for _ in range(RACE_ROUNDS):
        run_id = pg_app.start_workflow_run(TWO_LEAVES)
        assert pg_app.advance_workflow_run(run_id).started
        a = claimed_by_a_worker(pg_app, run_id, "a")
        b = claimed_by_a_worker(pg_app, run_id, "b")
        assert race(partial(succeed, pg_app, a), partial(succeed, pg_app, b)) == [True, True]
        # Whichever finish held the run row second saw both successes, or the one that
        # could not take it marked the run for a scheduler.
        pg_app.advance_woken_runs()
        assert pg_app.get_workflow_run(run_id).state == "succeeded"
        assert [t for t, _ in run_edges(pg_app, run_id)].count("succeed") == 1
        agrees_with_its_events(pg_app, run_id)
    assert marks(pg_app) == 0
