"""Execution timeouts, on both backends: an attempt running past its task's
``timeout_seconds`` (by the database's clock) is failed through the ``fail`` edge with
its own fencing token, so the worker's later finish is stale; the retry policy applies.

A timeout is a deadline set by the claim, which no heartbeat moves (unlike the lease).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any
from uuid import UUID

import pytest

from flowforge.aggregates.task_run import TIMED_OUT, timed_out_error
from flowforge.app.service import FlowForge
from tests.helpers import CLOCK_DEADLINE_S, POLL_S, claim, race, states, task_id

#: Short enough that a test waits for it by the database's clock, never by a sleep of
#: a guessed length.
TIMEOUT_S = 0.05


def timed(timeout: float | None = TIMEOUT_S, **fields: Any) -> dict[str, Any]:
    task: dict[str, Any] = {"key": "slow", "type": "work"}
    if timeout is not None:
        task["timeout_seconds"] = timeout
    return {"name": "timed", **fields, "tasks": [task]}


def overdue(app: FlowForge, task_run_id: UUID) -> None:
    """Poll until the database's clock has passed the task's deadline."""
    deadline = time.monotonic() + CLOCK_DEADLINE_S
    while task_run_id not in {t.task_run_id for t in app.overdue_tasks()}:
        assert time.monotonic() < deadline, "the deadline never passed"
        time.sleep(POLL_S)


def started(app: FlowForge, definition: dict[str, Any]) -> tuple[UUID, UUID]:
    run_id = app.start_workflow_run(definition)
    return run_id, task_id(app, run_id, "slow")


def test_a_claim_sets_the_deadline_from_the_databases_clock_and_a_heartbeat_leaves_it(
    app: FlowForge,
) -> None:
    _, task = started(app, timed(600.0))
    won = claim(app, task, "w1")
    row = app.get_task_run(task)
    assert row.timeout_seconds == 600.0
    assert row.deadline_at is not None and row.lease_expires_at is not None
    # The claim's lease (30 s) and deadline (600 s) start at the same database instant.
    assert (row.deadline_at - row.lease_expires_at).total_seconds() == pytest.approx(570)
    assert app.renew_lease(task, won.fencing_token, 30.0, actor="w1")
    assert app.get_task_run(task).deadline_at == row.deadline_at


def test_an_attempt_past_its_timeout_fails_and_its_workers_finish_is_stale(
    app: FlowForge,
) -> None:
    run_id, task = started(app, timed(retry={"max_attempts": 1}))
    won = claim(app, task, "w1")
    overdue(app, task)

    assert app.time_out_overdue_tasks() == [task]

    row = app.get_task_run(task)
    assert (row.state, row.lease_owner, row.deadline_at) == ("failed", None, None)
    assert row.error is not None and row.error["type"] == TIMED_OUT
    assert not app.finish_task_run(task, won.fencing_token, "succeed", {"late": True})
    app.schedule_once()
    assert app.get_workflow_run(run_id).state == "failed"
    fail = [e for e in app.history(task) if e.transition == "fail"]
    assert [(e.actor, e.fencing_token) for e in fail] == [("scheduler", won.fencing_token)]


def test_a_timed_out_attempt_is_retried_by_its_policy_with_a_new_deadline(
    app: FlowForge,
) -> None:
    run_id, task = started(app, timed(retry={"max_attempts": 2, "backoff_seconds": 0}))
    first = claim(app, task, "w1")
    overdue(app, task)
    app.schedule_once()  # times it out, then schedules and readies its retry
    assert states(app, run_id) == {"slow": "ready"}

    second = claim(app, task, "w2")
    assert (second.attempt, second.fencing_token) == (2, first.fencing_token + 1)
    assert app.get_task_run(task).deadline_at is not None
    assert app.finish_task_run(task, second.fencing_token, "succeed", {"ok": 1})
    app.schedule_once()
    assert app.get_workflow_run(run_id).state == "succeeded"


def test_nothing_times_out_before_its_deadline_or_without_a_timeout(app: FlowForge) -> None:
    _, limited = started(app, timed(600.0))
    _, unlimited = started(app, timed(None))
    claim(app, limited, "w1")
    claim(app, unlimited, "w2")
    token = app.get_task_run(limited).fencing_token

    assert app.time_out_overdue_tasks() == []
    assert not app.time_out_task_run(limited, token)
    assert app.get_task_run(unlimited).deadline_at is None
    assert {app.get_task_run(t).state for t in (limited, unlimited)} == {"running"}


def test_the_schedulers_timer_wakes_it_for_the_next_deadline(app: FlowForge) -> None:
    _, task = started(app, timed(600.0))
    claim(app, task, "w1", lease_s=3600.0)
    left = app.seconds_to_next_timer()
    assert left is not None and 590 < left <= 600


def test_a_finish_racing_its_timeout_either_wins_whole_or_is_stale(pg_app: FlowForge) -> None:
    """Both are conditional on the attempt's token and on running: exactly one writes,
    and the row and the log agree on which. (PostgreSQL's race: SQLite serialises
    its writers.)"""
    app = pg_app
    for _ in range(5):
        _, task = started(app, timed(retry={"max_attempts": 1}))
        won = claim(app, task, "w1")
        overdue(app, task)
        finished, timed_out = race(
            partial(app.finish_task_run, task, won.fencing_token, "succeed", {"ok": 1}),
            partial(app.time_out_task_run, task, won.fencing_token),
        )
        assert finished != timed_out
        row = app.get_task_run(task)
        assert row.state == ("succeeded" if finished else "failed")
        edges = [e.transition for e in app.history(task)]
        assert edges.count("succeed") + edges.count("fail") == 1


def test_a_time_out_under_an_earlier_attempts_token_leaves_the_overdue_attempt_in_hand(
    app: FlowForge,
) -> None:
    """The time-out is the ``fail`` edge of one attempt, named by its fencing token: a
    scheduler's time-out of attempt 1 (read before its retry was claimed) cannot fail
    attempt 2, overdue as that one may be, in the service or in its SQL."""
    _, task = started(app, timed(retry={"max_attempts": 2, "backoff_seconds": 0}))
    first = claim(app, task, "w1")
    overdue(app, task)
    app.schedule_once()  # times attempt 1 out, then schedules and readies its retry
    second = claim(app, task, "w2")
    overdue(app, task)

    assert not app.time_out_task_run(task, first.fencing_token)
    error = timed_out_error(TIMEOUT_S, first.attempt)
    with app.store.write() as writes:
        assert writes.tasks.time_out(task, first.fencing_token, error, actor="scheduler") is None
    row = app.get_task_run(task)
    assert (row.state, row.fencing_token, row.lease_owner) == (
        "running",
        second.fencing_token,
        "w2",
    )
    # Under its own token the overdue attempt is timed out.
    assert app.time_out_task_run(task, second.fencing_token)
    assert app.get_task_run(task).state == "failed"
