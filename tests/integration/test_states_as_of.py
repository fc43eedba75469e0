"""``FlowForge.task_states_as_of``: each task changed after a moment, as its newest event
at or before that moment says (one indexed query, ``reading.sql``), on both backends.

It must agree with the replay of the run's audit log (``ui/replay.task_states``, the
fold ``flowforge why --at`` reads) at every moment the log holds, and just before each:
a task created later is ``None``, a retried task has its attempt then.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import psycopg

from flowforge.app.service import FlowForge
from flowforge.ui import replay
from tests.conftest import empty_postgres
from tests.helpers import task_id

FLAKY_CHAIN = {
    "name": "flaky_chain",
    "retry": {"max_attempts": 2, "backoff_seconds": 0, "jitter": 0.0},
    "tasks": [
        {"key": "a", "type": "work"},
        {"key": "b", "type": "work", "depends_on": ["a"]},
    ],
}


def finish(app: FlowForge, run_id: UUID, key: str, outcome: str) -> None:
    claim = app.claim_task_run(task_id(app, run_id, key), "w", 30)
    assert claim is not None
    error = {"type": "Boom", "message": "boom"} if outcome == "fail" else None
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, outcome, error=error)


def test_the_states_as_of_each_moment_agree_with_the_replay_of_the_log(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FLAKY_CHAIN)
    app.schedule_once()
    finish(app, run_id, "a", "fail")
    app.schedule_once()  # a retries: attempt 2, ready again
    finish(app, run_id, "a", "succeed")
    finish(app, run_id, "b", "succeed")
    history = app.run_history(run_id)
    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    assert tasks["a"].attempt == 2
    moments = sorted({e.at for e in history})
    for at in [moments[0] - timedelta(microseconds=1), *moments]:
        replayed = replay.task_states(history, at)
        read = app.task_states_as_of(run_id, at)
        changed = {key for key, t in tasks.items() if t.updated_at > at}
        assert set(read) == changed, at
        expected = {key: replayed.get(key) for key in changed}
        got = {key: replay.TaskAsOf(*then) if then else None for key, then in read.items()}
        assert got == expected, at
    assert app.task_states_as_of(run_id, moments[0] - timedelta(microseconds=1)) == {
        "a": None,
        "b": None,
    }


def test_events_written_in_another_time_zone_are_compared_as_times(postgres_url: str) -> None:
    """A session whose TimeZone is not UTC writes its events' times with its offset
    (the SQL-built events' ``to_json(now())``): those are parsed, not compared as text."""
    empty_postgres(postgres_url)
    with FlowForge(f"{postgres_url}?options=-c%20TimeZone%3DAsia/Kolkata") as app:
        test_the_states_as_of_each_moment_agree_with_the_replay_of_the_log(app)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT convert_from(state, 'UTF8') FROM flowforge_events").fetchall()
    assert any('+05:30"' in state for (state,) in rows)  # the other path was taken
