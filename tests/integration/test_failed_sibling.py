"""A task that failed for good keeps its run from succeeding, whichever finish of a
sibling comes after it: on both backends, single or batched, by the leaf's one round
trip (``run_succeed_after_finish``, PostgreSQL) or the general advance
(``run_succeed_when_complete``, both).

A failure's finish only marks its run (the scheduler decides retry or fail-for-good),
so between the two the run is running with one task ``failed`` and no attempt left. The
sibling's success then finds no task pending, ready, running or retrying, and none
cancelled: only the failed task stands between the run and ``succeeded``, and each
guard must see it. The scheduler then fails the run.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from flowforge import Finish
from flowforge.app.service import FlowForge
from tests.helpers import run_edges
from tests.integration.test_leaf_finish import TWO_LEAVES, claimed_by_a_worker

ERROR = {"type": "Boom", "message": "a failed for good"}


def with_a_failed_sibling(app: FlowForge) -> tuple[UUID, tuple[UUID, int]]:
    """A run whose task ``a`` failed for good (one attempt) while ``b`` runs; ``b``'s
    claim, made as a worker makes it (the run's definition parsed here)."""
    run_id = app.start_workflow_run(TWO_LEAVES)
    a, b = claimed_by_a_worker(app, run_id, "a"), claimed_by_a_worker(app, run_id, "b")
    assert app.finish_task_run(*a, "fail", error=ERROR, actor="w")
    failed = app.get_task_run(a[0])
    assert (failed.state, failed.attempt, failed.max_attempts) == ("failed", 1, 1)
    assert app.get_workflow_run(run_id).state == "running"
    return run_id, b


def succeed(app: FlowForge, task: tuple[UUID, int], path: str) -> bool:
    """``b``'s success by ``path``: ``single`` (on PostgreSQL the leaf's one round trip),
    ``batched`` (a batch of one: the same on PostgreSQL), or ``general`` (the claim's
    memo gone, as in a process that did not claim it: the general advance)."""
    if path == "general":
        assert app.claims.take(*task) is not None
    if path == "batched":
        (written,) = app.finish_task_runs([Finish(*task, "succeed", {"b": 1})], actor="w")
        return written
    return app.finish_task_run(*task, "succeed", {"b": 1}, actor="w")


@pytest.mark.parametrize("path", ["single", "batched", "general"])
def test_a_sibling_that_succeeds_after_a_task_failed_for_good_does_not_succeed_the_run(
    app: FlowForge, path: str
) -> None:
    run_id, b = with_a_failed_sibling(app)
    assert succeed(app, b, path)
    assert app.get_task_run(b[0]).state == "succeeded"
    assert app.get_workflow_run(run_id).state == "running"
    # The scheduler (woken by the failure's mark) fails the run; it never succeeded.
    app.advance_woken_runs()
    assert app.get_workflow_run(run_id).state == "failed"
    assert "succeed" not in [edge for edge, _ in run_edges(app, run_id)]
