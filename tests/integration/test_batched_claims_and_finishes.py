"""Batched claims and finishes (``claim_task_runs_and_their_runs``, ``finish_task_runs``).

A batch is one transaction (on PostgreSQL one round trip with its ``COMMIT``) holding
each task's own conditional write and event: a claim that loses, or a finish with a
stale fencing token, writes nothing and leaves the rest of its batch alone. The single
commands are batches of one, so every other test of a claim or a finish tests this
path too; these pin what only a batch can get wrong: order, sharing a run, a bad item,
racing batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import pytest

from flowforge import Finish, errors
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.bounds import MAX_BATCH
from tests.helpers import (
    TASK_CREATED_TOPIC,
    RoundTrip,
    forge_event,
    logged,
    one_task,
    race,
    run_edges,
)
from tests.integration.test_leaf_finish import (
    TWO_LEAVES,
    agrees_with_its_events,
    recorded_success,
)

ONE_TASK: dict[str, Any] = one_task("t", "w")
CHAIN: dict[str, Any] = {
    "name": "chain",
    "tasks": [{"key": "a", "type": "w"}, {"key": "b", "type": "w", "depends_on": ["a"]}],
}
BATCH = 5
RUN_CREATED_TOPIC = "flowforge.aggregates.workflow_run:WorkflowRun.Created"
RACE_ROUNDS = 5


def ready_tasks(app: FlowForge, definition: Mapping[str, Any], runs: int) -> list[UUID]:
    """The ready tasks of ``runs`` new runs of ``definition``, run by run."""
    ids: list[UUID] = []
    for _ in range(runs):
        run_id = app.start_workflow_run(definition)
        ids += [t.id for t in app.task_runs(run_id) if t.state == "ready"]
    return ids


def claimed(app: FlowForge, ids: list[UUID], worker: str = "w") -> list[TaskRunView]:
    """A worker's batched claim of ``ids``, every one won, runs parsed as a worker does."""
    rows, runs = app.claim_task_runs_and_their_runs(ids, worker)
    for run in runs:
        app.definitions.of(run)
    won = [row for row in rows if row is not None]
    assert len(won) == len(ids)
    return won


def successes(rows: list[TaskRunView]) -> list[Finish]:
    return [Finish(r.id, r.fencing_token, "succeed", {"n": i}) for i, r in enumerate(rows)]


def test_a_batched_claim_claims_each_task_with_its_own_token_and_event(app: FlowForge) -> None:
    ids = ready_tasks(app, ONE_TASK, BATCH)
    given = list(reversed(ids))  # results come back in the order asked, whatever the lock order
    rows, runs = app.claim_task_runs_and_their_runs(given, "w")
    assert [row.id for row in rows if row is not None] == given
    # Each task's run, once each.
    assert sorted(run.id for run in runs) == sorted(row.workflow_run_id for row in rows if row)
    for row in rows:
        assert row is not None
        assert (row.state, row.lease_owner, row.fencing_token) == ("running", "w", 1)
        assert app.task_run_aggregate(row.id).version == row.version


def test_a_batched_claim_that_loses_one_task_claims_the_others(app: FlowForge) -> None:
    ids = ready_tasks(app, ONE_TASK, 3)
    assert app.claim_task_run(ids[1], "first", 30.0) is not None
    rows, runs = app.claim_task_runs_and_their_runs(ids, "second")
    assert [row is not None for row in rows] == [True, False, True]
    assert len(runs) == 3  # the lost task's run too: the worker reads the task to tell why
    assert app.get_task_run(ids[1]).lease_owner == "first"
    assert app.task_run_aggregate(ids[1]).version == app.get_task_run(ids[1]).version


def test_a_batched_claim_that_fails_at_a_later_task_claims_none_of_its_tasks(
    app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    """A batch is one transaction, on PostgreSQL one round trip with no BEGIN that its
    Sync commits: an error at its later task (that task's run cannot record its start,
    an event is already at the run's next version) undoes the claim and the run's start
    before it, not only its own."""
    ids = sorted(ready_tasks(app, ONE_TASK, 2))  # the order the batch claims them in
    runs = [app.get_task_run(i).workflow_run_id for i in ids]
    forge_event(app.store, runs[1], 2)

    def rows() -> list[tuple[TaskRunView, WorkflowRunView]]:
        pairs = zip(ids, runs, strict=True)
        return [(app.get_task_run(i), app.get_workflow_run(r)) for i, r in pairs]

    before = rows()
    round_trips.clear()
    with pytest.raises(errors.PersistenceError):
        app.claim_task_runs_and_their_runs(ids, "w")
    if app.store.dialect == "postgres":
        (trip,) = round_trips
        assert not trip.text.startswith(b"BEGIN")
    assert rows() == before
    assert before[0][0].state == "ready" and before[0][1].state == "pending"
    assert logged(app.store, ids[0]) == [(1, TASK_CREATED_TOPIC)]
    assert logged(app.store, runs[0]) == [(1, RUN_CREATED_TOPIC)]


def test_a_batched_claim_reads_a_known_run_not_again(app: FlowForge) -> None:
    run_id = app.start_workflow_run(TWO_LEAVES)
    ids = [t.id for t in app.task_runs(run_id)]
    rows, runs = app.claim_task_runs_and_their_runs(ids, "w", unless_known=[run_id])
    assert runs == []
    assert all(row is not None for row in rows)
    # Two tasks of one run that the worker does not know: the run comes back once.
    other = app.start_workflow_run(TWO_LEAVES)
    rows, runs = app.claim_task_runs_and_their_runs([t.id for t in app.task_runs(other)], "w")
    assert [run.id for run in runs] == [other]


def test_a_batch_of_leaf_successes_is_one_round_trip(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    ids = ready_tasks(pg_app, ONE_TASK, BATCH)
    round_trips.clear()
    rows = claimed(pg_app, ids)
    assert len(round_trips) == 1 and round_trips[0].committed
    round_trips.clear()
    assert pg_app.finish_task_runs(successes(rows), actor="batcher") == [True] * BATCH
    assert len(round_trips) == 1 and round_trips[0].committed
    for i, row in enumerate(rows):
        assert pg_app.get_task_run(row.id).result == {"n": i}
        recorded_success(pg_app, (row.id, row.fencing_token), {"n": i}, "batcher")
        run_id = row.workflow_run_id
        assert pg_app.get_workflow_run(run_id).state == "succeeded"
        assert run_edges(pg_app, run_id)[1:] == [("start", "w"), ("succeed", "batcher")]
        agrees_with_its_events(pg_app, run_id)


def test_a_stale_finish_in_a_batch_writes_nothing_and_holds_back_nothing(
    app: FlowForge,
) -> None:
    rows = claimed(app, ready_tasks(app, ONE_TASK, 3))
    finishes = successes(rows)
    stale = Finish(rows[1].id, rows[1].fencing_token + 1, "succeed", {"stale": True})
    assert app.finish_task_runs([finishes[0], stale, finishes[2]]) == [True, False, True]
    assert [app.get_task_run(r.id).state for r in rows] == ["succeeded", "running", "succeeded"]
    assert app.get_task_run(rows[1].id).result is None
    assert app.task_run_aggregate(rows[1].id).version == rows[1].version


def test_two_leaves_of_one_run_in_one_batch_succeed_it_once(pg_app: FlowForge) -> None:
    run_id = pg_app.start_workflow_run(TWO_LEAVES)
    rows = claimed(pg_app, [t.id for t in pg_app.task_runs(run_id)])
    assert pg_app.finish_task_runs(successes(rows), actor="batcher") == [True, True]
    for i, row in enumerate(rows):
        recorded_success(pg_app, (row.id, row.fencing_token), {"n": i}, "batcher")
    assert pg_app.get_workflow_run(run_id).state == "succeeded"
    assert [t for t, _ in run_edges(pg_app, run_id)].count("succeed") == 1
    agrees_with_its_events(pg_app, run_id)
    # Settled by the batch itself: a scheduler finds nothing left to finish.
    assert pg_app.advance_woken_runs().runs_finished == 0


def test_a_mixed_batch_finishes_each_task_by_its_own_path(app: FlowForge) -> None:
    leaf, failing = ready_tasks(app, ONE_TASK, 2)
    chain_run = app.start_workflow_run(CHAIN)
    (first,) = [t.id for t in app.task_runs(chain_run) if t.state == "ready"]
    rows = claimed(app, [leaf, failing, first])
    finishes = [
        Finish(rows[0].id, rows[0].fencing_token, "succeed", {"leaf": True}),
        Finish(rows[1].id, rows[1].fencing_token, "fail", error={"type": "E", "message": "m"}),
        Finish(rows[2].id, rows[2].fencing_token, "succeed", {"first": True}),
    ]
    assert app.finish_task_runs(finishes) == [True, True, True]
    assert [app.get_task_run(r.id).state for r in rows] == ["succeeded", "failed", "succeeded"]
    # The chain's first task has a dependent: its finish took the general path, which
    # promotes the next task in the same transaction.
    assert {t.task_key: t.state for t in app.task_runs(chain_run)}["b"] == "ready"


def test_a_batch_with_one_bad_finish_writes_nothing(app: FlowForge) -> None:
    rows = claimed(app, ready_tasks(app, ONE_TASK, 2))
    bad = Finish(rows[1].id, rows[1].fencing_token, "succeed", {"not json": {1, 2}})
    with pytest.raises(ValueError, match="result"):
        app.finish_task_runs([successes(rows)[0], bad])
    unknown = Finish(rows[1].id, rows[1].fencing_token, "explode")
    with pytest.raises(errors.IllegalTransitionError):
        app.finish_task_runs([successes(rows)[0], unknown])
    assert [app.get_task_run(r.id).state for r in rows] == ["running", "running"]


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        ([], "1 to"),
        ([uuid4()] * 2, "distinct; repeated"),
        ([uuid4() for _ in range(MAX_BATCH + 1)], "1 to"),
    ],
)
def test_a_batch_that_is_empty_repeats_a_task_or_is_too_big_is_refused(
    app: FlowForge, ids: list[UUID], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        app.claim_task_runs_and_their_runs(ids, "w")
    with pytest.raises(ValueError, match=problem):
        app.finish_task_runs([Finish(i, 1, "succeed") for i in ids])


def test_racing_batches_of_sibling_leaves_succeed_each_run_exactly_once(
    pg_app: FlowForge,
) -> None:
    """Two workers each finish one leaf of the same runs in one batch, at once: whichever
    holds a run's row second sees both successes, or the one that could not take it
    marks the run for a scheduler."""
    for _ in range(RACE_ROUNDS):
        runs = [pg_app.start_workflow_run(TWO_LEAVES) for _ in range(BATCH)]
        tasks: dict[str, list[UUID]] = {"a": [], "b": []}
        for run_id in runs:
            for task in pg_app.task_runs(run_id):
                tasks[task.task_key].append(task.id)
        a, b = claimed(pg_app, tasks["a"], "wa"), claimed(pg_app, tasks["b"], "wb")
        finish_a = partial(pg_app.finish_task_runs, successes(a), actor="wa")
        finish_b = partial(pg_app.finish_task_runs, successes(b), actor="wb")
        assert race(finish_a, finish_b) == [[True] * BATCH, [True] * BATCH]
        pg_app.advance_woken_runs()
        for run_id in runs:
            assert pg_app.get_workflow_run(run_id).state == "succeeded"
            assert [t for t, _ in run_edges(pg_app, run_id)].count("succeed") == 1
            agrees_with_its_events(pg_app, run_id)


def test_racing_batched_claims_of_the_same_tasks_claim_each_once(pg_app: FlowForge) -> None:
    """Two batches naming the same tasks in opposite orders: every task is claimed by
    exactly one of them, and neither deadlocks (rows are claimed in the order of ids)."""
    for _ in range(RACE_ROUNDS):
        ids = ready_tasks(pg_app, ONE_TASK, BATCH)
        one = partial(pg_app.claim_task_runs_and_their_runs, ids, "one")
        other = partial(pg_app.claim_task_runs_and_their_runs, list(reversed(ids)), "other")
        got_one, got_other = race(one, other)
        won = [row.id for row in [*got_one[0], *got_other[0]] if row is not None]
        assert sorted(won) == sorted(ids)
        for task_id in ids:
            assert pg_app.get_task_run(task_id).fencing_token == 1
