"""A worker lost too often, on both backends (docs/execution-model.md, "A worker lost too
often"): below a task's bound of lost workers the reaper's reclaim is the spec's
``reap_lease``, counted; at the bound it fails the attempt with ``WorkerLost``, and the
retry policy applies with the bound still held.

Leases here are tiny and waited out by the database's clock (``wait_until_expired``).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from starlette.testclient import TestClient

from flowforge import observe
from flowforge.aggregates.lost_workers import WORKER_LOST
from flowforge.app.service import FlowForge
from flowforge.app.why import why
from flowforge.cli import render
from flowforge.ui import create_app
from tests.helpers import claim, states, task_id, wait_until_expired

#: A lease that has expired by the time the test looks (by the database's clock).
TINY_LEASE_S = 0.02


class Counted(observe.Observer):
    """The reaper's announcements, counted."""

    def __init__(self) -> None:
        self.reaped = self.lost_too_often = 0

    def leases_reaped(self, count: int) -> None:
        self.reaped += count

    def workers_lost_too_often(self, count: int) -> None:
        self.lost_too_often += count


def crashing(**fields: Any) -> dict[str, Any]:
    task = {"key": "crash", "type": "crash", **fields.pop("task", {})}
    return {"name": "crashes", "retry": {"max_attempts": 1}, **fields, "tasks": [task]}


def lose_worker(app: FlowForge, task: UUID, worker: str) -> int:
    """Claim the task, let the lease run out and reap it; the token the worker held."""
    held = claim(app, task, worker, TINY_LEASE_S)
    wait_until_expired(app, task)
    assert app.reap_expired_leases() == [task]
    return held.fencing_token


def test_below_the_bound_a_reap_makes_the_task_ready_again_and_counts_the_loss(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(crashing(max_worker_losses=3))
    task = task_id(app, run_id, "crash")
    for losses in (1, 2):
        lose_worker(app, task, f"w{losses}")
        row = app.get_task_run(task)
        assert (row.state, row.worker_losses, row.attempt) == ("ready", losses, 1)
    edges = [e.transition for e in app.history(task)]
    assert edges == ["create", "claim", "reap_lease", "claim", "reap_lease"]
    assert "lost its worker (2 so far)" in "\n".join(render.history_lines(app.history(task)))


def test_at_the_bound_the_reaper_fails_the_attempt_with_worker_lost_and_the_run_fails(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(crashing(max_worker_losses=2))
    task = task_id(app, run_id, "crash")
    counted = Counted()
    with observe.installed(counted):
        lose_worker(app, task, "w1")
        stale = lose_worker(app, task, "w2")
    assert (counted.reaped, counted.lost_too_often) == (2, 1)

    row = app.get_task_run(task)
    assert (row.state, row.worker_losses, row.lease_owner) == ("failed", 2, None)
    assert row.error is not None and row.error["type"] == WORKER_LOST
    assert not app.finish_task_run(task, stale, "succeed", {"late": True})
    last = app.history(task)[-1]
    assert (last.transition, last.actor, last.event) == ("fail", "reaper", "Failed")

    app.schedule_once()
    assert app.get_workflow_run(run_id).state == "failed"
    explained = why(app, task)
    assert "lost its worker 2 times" in explained.headline
    assert "lost its worker 2 times" in "\n".join(render.history_lines(app.history(task)))
    assert "lost its worker 2 times" in render.error_line(app.get_task_run(task).error)


def test_after_the_bound_each_retry_fails_on_its_first_lost_worker(app: FlowForge) -> None:
    """The count is never reset: the retry policy decides after each WorkerLost, and
    every later lost worker fails its attempt at once. The task's own bound (1) wins
    over its workflow's (5)."""
    retry = {"max_attempts": 2, "backoff_seconds": 0}
    run_id = app.start_workflow_run(
        crashing(max_worker_losses=5, retry=retry, task={"max_worker_losses": 1})
    )
    task = task_id(app, run_id, "crash")
    lose_worker(app, task, "w1")
    assert app.get_task_run(task).state == "failed"
    app.schedule_once()  # schedules the retry and makes it ready
    assert states(app, run_id) == {"crash": "ready"}

    lose_worker(app, task, "w2")
    row = app.get_task_run(task)
    assert (row.state, row.attempt, row.worker_losses) == ("failed", 2, 2)
    assert row.error is not None and "lost its worker 2 times" in row.error["message"]
    app.schedule_once()
    assert app.get_workflow_run(run_id).state == "failed"


def test_a_finish_before_the_reaper_leaves_the_count_alone(app: FlowForge) -> None:
    run_id = app.start_workflow_run(crashing(max_worker_losses=1))
    task = task_id(app, run_id, "crash")
    won = claim(app, task, "w1", TINY_LEASE_S)
    assert app.finish_task_run(task, won.fencing_token, "succeed", {"ok": 1})
    assert app.reclaim_task_run(task) is False
    row = app.get_task_run(task)
    assert (row.state, row.worker_losses) == ("succeeded", 0)


def test_the_rebuild_gives_back_the_count_and_the_bound(app: FlowForge) -> None:
    """``worker_losses`` and ``max_worker_losses`` are carried by the events: dropping
    the rows and rebuilding them from the log gives the same task row."""
    retry = {"max_attempts": 2, "backoff_seconds": 0}
    run_id = app.start_workflow_run(crashing(retry=retry, task={"max_worker_losses": 2}))
    task = task_id(app, run_id, "crash")
    lose_worker(app, task, "w1")
    lose_worker(app, task, "w2")
    app.schedule_once()
    before = app.get_task_run(task)
    assert (before.state, before.worker_losses, before.max_worker_losses) == ("ready", 2, 2)
    app.rebuild_projections()
    assert app.get_task_run(task) == before


def test_the_ui_says_the_task_lost_its_worker(app: FlowForge) -> None:
    run_id = app.start_workflow_run(crashing(max_worker_losses=2))
    task = task_id(app, run_id, "crash")
    lose_worker(app, task, "w1")
    with TestClient(create_app(app, token=None)) as client:
        page = client.get(f"/tasks/{task}").text
        assert "lost its worker 1 time" in page
        assert "lost its worker: the lease expired with no finish" in page
        lose_worker(app, task, "w2")
        assert "WorkerLost: lost its worker 2 times" in client.get(f"/tasks/{task}").text
        assert "WorkerLost: lost its worker 2 times" in client.get(f"/runs/{run_id}").text
