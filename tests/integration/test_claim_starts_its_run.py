"""A run's first claim starts it (``run_start_after_claim``), on both backends.

The spec derives a run's state from its tasks: pending until one of them runs. A run is
created pending, marking nothing for a scheduler; the claim of its first task starts it
in the claim's own transaction, by the worker. The start never waits for the run's row
(the claim holds its task row; every advance takes the run row first), and re-checks
``pending`` on the row it locked, so racing claims (Barrier) start a run exactly once,
and a claim racing a user's cancel neither deadlocks nor starts a cancelled run.
"""

from __future__ import annotations

from functools import partial

import psycopg
import pytest

from flowforge.app.service import FlowForge
from tests.helpers import marks, race, run_edges

TWO = {
    "name": "two",
    "tasks": [{"key": "a", "type": "work"}, {"key": "b", "type": "work"}],
}
RACE_ROUNDS = 10


def test_a_batch_of_claims_starts_each_run_once_and_a_later_claim_starts_nothing(
    app: FlowForge,
) -> None:
    runs = app.start_workflow_runs(TWO, [{}, {}, {}])
    assert marks(app) == 0  # creation leaves a scheduler nothing to do
    firsts = [t.id for r in runs for t in app.task_runs(r) if t.task_key == "a"]
    rows, read = app.claim_task_runs_and_their_runs(firsts, "w1")
    assert all(row is not None for row in rows)
    assert {run.state for run in read} == {"running"}  # the runs read after the starts
    for run_id in runs:
        assert run_edges(app, run_id) == [("create", "user"), ("start", "w1")]
    seconds = [t.id for r in runs for t in app.task_runs(r) if t.task_key == "b"]
    app.claim_task_runs_and_their_runs(seconds, "w2")
    for run_id in runs:
        run = app.get_workflow_run(run_id)
        assert (run.state, run.version) == ("running", 2)  # not started again
    assert marks(app) == 0


def test_a_lost_claim_starts_nothing(app: FlowForge) -> None:
    run_id = app.start_workflow_run(TWO)
    task = next(t for t in app.task_runs(run_id) if t.task_key == "a")
    assert app.cancel_workflow_run(run_id)
    assert app.claim_task_run(task.id, "w1", 30) is None
    assert app.get_workflow_run(run_id).state == "cancelled"
    assert run_edges(app, run_id) == [("create", "user"), ("cancel_before_start", "user")]


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_racing_claims_of_one_run_start_it_exactly_once(app: FlowForge) -> None:
    for _ in range(RACE_ROUNDS):
        run_id = app.start_workflow_run(TWO)
        a, b = (t.id for t in sorted(app.task_runs(run_id), key=lambda t: t.task_key))
        claims = race(
            partial(app.claim_task_run, a, "w1", 30), partial(app.claim_task_run, b, "w2", 30)
        )
        assert all(claim is not None for claim in claims)
        run = app.get_workflow_run(run_id)
        assert (run.state, run.version) == ("running", 2)
        assert [edge for edge, _ in run_edges(app, run_id)] == ["create", "start"]


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_claim_never_waits_for_its_run_row(app: FlowForge, postgres_url: str) -> None:
    run_id = app.start_workflow_run(TWO)
    task = next(t for t in app.task_runs(run_id) if t.task_key == "a")
    with psycopg.connect(postgres_url) as holder:
        # A scheduler mid-advance of the run, say: it holds the run row.
        holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (run_id,))
        (claim,) = race(lambda: app.claim_task_run(task.id, "w1", 30))  # else: never finished
        assert claim is not None
        assert app.get_workflow_run(run_id).state == "pending"  # left to its finish
    assert app.finish_task_run(task.id, claim.fencing_token, "succeed", actor="w1")
    assert app.get_workflow_run(run_id).state == "running"  # started by the finish


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_claim_racing_a_cancel_of_its_run_never_deadlocks_or_revives_it(
    app: FlowForge,
) -> None:
    for _ in range(RACE_ROUNDS):
        run_id = app.start_workflow_run(TWO)
        task = next(t for t in app.task_runs(run_id) if t.task_key == "a")
        race(
            partial(app.claim_task_run, task.id, "w1", 30),
            partial(app.cancel_workflow_run, run_id),
        )
        app.advance_woken_runs()  # what the cancel left for a scheduler
        assert app.get_workflow_run(run_id).state == "cancelled"
        edges = [edge for edge, _ in run_edges(app, run_id)]
        assert edges in (["create", "cancel_before_start"], ["create", "start", "cancel"])
