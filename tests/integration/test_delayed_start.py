"""Delayed start, on both backends: a run submitted with a start time stays pending,
none of its tasks ready or dispatched, until then by the database's clock; the
scheduler then starts it exactly once (two schedulers racing included) and it runs as
any other; a cancel before the start leaves nothing to fire; the rebuild reproduces it.

Most tests delay by an hour, so nothing can start while they look. The ones that need
the start time to come use a delay of a fraction of a second, counted from the
database's now, and wait for the database's clock to pass it (not a sleep that widens a
race: nothing races until then).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.scheduler import Scheduler
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import (
    CLOCK_DEADLINE_S,
    POLL_S,
    Recorder,
    race,
    run_to_end,
    states,
    task_id,
    wait_until,
)
from tests.integration.test_contract import DirectDatabase
from tests.integration.test_rebuild import assert_log_agrees_with_rows, differences
from tests.integration.test_rerun import raw_rows
from tests.integration.test_scheduler import DIAMOND  # a -> (b, c) -> d
from tests.integration.test_wakeups import HOUR, WAIT_S, other, running

__all__ = ["other"]  # a fixture, used by name

LATER = timedelta(hours=1)
#: Long enough to look at the run before it starts, short enough to wait for.
SOON = timedelta(seconds=0.3)


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder) -> Worker:
    return Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-test")


@pytest.fixture
def direct(app: FlowForge, request: pytest.FixtureRequest) -> DirectDatabase:
    dialect = app.database.dialect
    url = request.getfixturevalue("postgres_url" if dialect == "postgres" else "sqlite_url")
    return DirectDatabase(dialect, url)


def wait_for_start_time(app: FlowForge, run_id: UUID) -> None:
    """Poll until the database's clock has passed the run's start time."""
    start_at = app.get_workflow_run(run_id).start_at
    assert start_at is not None
    deadline = time.monotonic() + CLOCK_DEADLINE_S
    while app.database_now() < start_at:
        assert time.monotonic() < deadline, f"the database's clock never reached {start_at}"
        time.sleep(POLL_S)


def dispatches(app: FlowForge, run_id: UUID) -> int:
    return sum(len(app.dispatches_of(t.id)) for t in app.task_runs(run_id))


def test_a_delayed_run_stays_pending_with_no_task_ready_or_dispatched(app: FlowForge) -> None:
    before = app.database_now()
    run_id = app.start_workflow_run(DIAMOND, start_at=LATER)

    run = app.get_workflow_run(run_id)
    after = app.database_now()
    assert run.state == "pending"
    # Counted from the database's now at the creation, not this process's clock.
    assert run.start_at is not None
    assert before + LATER <= run.start_at <= after + LATER
    assert run.start_at == run.created_at + LATER
    assert states(app, run_id) == dict.fromkeys("abcd", "pending")
    assert dispatches(app, run_id) == 0
    # Neither an advance, nor the scheduler's passes (woken or full) start it or promote.
    assert app.advance_workflow_run(run_id).waiting_to_start
    summary = app.schedule_once()
    assert (summary.promoted, summary.runs_advanced) == (0, 0)
    assert app.get_workflow_run(run_id).state == "pending"
    assert states(app, run_id) == dict.fromkeys("abcd", "pending")
    assert [e.transition for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"] == [
        "create"
    ]


def test_the_creation_wakes_the_scheduler_whose_timer_then_waits_for_the_start(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=LATER)
    # The creation marks the run: a woken scheduler finds it waiting and asks its timer.
    assert app.advance_woken_runs().waiting_to_start == 1
    timer = app.seconds_to_next_timer()
    assert timer is not None
    assert LATER.total_seconds() - 5 < timer <= LATER.total_seconds()
    assert app.get_workflow_run(run_id).state == "pending"


def test_a_woken_advance_after_the_start_time_starts_it_and_promotes_its_roots(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
    wait_for_start_time(app, run_id)
    # The creation's mark, advanced late: the start alone would leave the roots pending.
    summary = app.advance_woken_runs()
    assert (summary.runs_advanced, summary.promoted, summary.waiting_to_start) == (1, 1, 0)
    assert states(app, run_id)["a"] == "ready"
    assert app.get_workflow_run(run_id).state == "running"


def test_an_idle_scheduler_starts_a_delayed_run_on_time_without_its_periodic_pass(
    app: FlowForge, other: FlowForge
) -> None:
    scheduler = Scheduler(other, interval=HOUR)  # one pass at its start, then only timers
    with running(scheduler):
        wait_until(lambda: scheduler._next_pass > 0, WAIT_S, "first pass done")
        run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
        # Its creation's wake-up set the scheduler's timer to its start time.
        wait_until(lambda: states(app, run_id)["a"] == "ready", WAIT_S, "the run started")
    run = app.get_workflow_run(run_id)
    assert run.state == "running"
    assert run.start_at is not None and run.started_at is not None
    assert run.started_at >= run.start_at


def test_the_timer_counts_only_start_times_still_to_come(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
    wait_for_start_time(app, run_id)
    # Past its start time, the run is the safety net's, not a timer that fires at once.
    assert app.seconds_to_next_timer() is None


def test_once_its_start_time_has_come_the_scheduler_starts_it_and_it_runs_to_the_end(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker
) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
    start_at = app.get_workflow_run(run_id).start_at
    assert start_at is not None
    wait_for_start_time(app, run_id)

    summary = app.schedule_once()

    assert (summary.runs_advanced, summary.promoted) == (1, 1)
    run = app.get_workflow_run(run_id)
    assert run.state == "running"
    assert run.started_at is not None and run.started_at >= start_at
    assert states(app, run_id) == {"a": "ready", "b": "pending", "c": "pending", "d": "pending"}
    assert len(app.dispatches_of(task_id(app, run_id, "a"))) == 1
    assert run_to_end(app, channel, worker, run_id).state == "succeeded"


def test_a_start_time_already_past_starts_the_run_at_once(app: FlowForge) -> None:
    past = datetime(2020, 1, 1, tzinfo=UTC)
    for start_at in (past, timedelta(0), timedelta(seconds=-5)):
        run_id = app.start_workflow_run(DIAMOND, start_at=start_at)
        run = app.get_workflow_run(run_id)
        # No delay: recorded as none, its first task ready as an undelayed run's is.
        assert (run.state, run.start_at) == ("pending", None)
        assert states(app, run_id)["a"] == "ready"
        assert len(app.dispatches_of(task_id(app, run_id, "a"))) == 1


def test_an_aware_start_time_is_recorded_as_given(app: FlowForge) -> None:
    plus_one = timezone(timedelta(hours=1))
    start_at = (app.database_now() + LATER).astimezone(plus_one).replace(microsecond=0)
    run_id = app.start_workflow_run(DIAMOND, start_at=start_at)
    assert app.get_workflow_run(run_id).start_at == start_at
    created = next(e for e in app.run_history(run_id) if e.transition == "create")
    assert created.start_at == start_at


@pytest.mark.parametrize(
    ("start_at", "problem"),
    [
        (datetime(2030, 1, 1, 12, 0), "must be timezone-aware"),
        (timedelta(days=400), "at most 365 days"),
        ("2030-01-01T12:00:00Z", "start_at is a datetime"),
    ],
)
def test_a_bad_start_time_is_refused_before_anything_is_written(
    app: FlowForge, direct: DirectDatabase, start_at: object, problem: str
) -> None:
    events = direct.count_events()
    with pytest.raises((ValueError, TypeError), match=problem):
        app.start_workflow_run(DIAMOND, start_at=start_at)  # type: ignore[arg-type]
    assert direct.count_events() == events
    assert app.recent_runs() == []


def test_cancelling_a_delayed_run_before_it_starts_leaves_nothing_to_fire(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
    assert app.cancel_workflow_run(run_id)
    run = app.get_workflow_run(run_id)
    assert run.state == "cancelled"
    assert states(app, run_id) == dict.fromkeys("abcd", "cancelled")
    assert [e.transition for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"] == [
        "create",
        "cancel_before_start",
    ]

    wait_for_start_time(app, run_id)
    app.schedule_once()
    assert app.seconds_to_next_timer() is None
    assert app.get_workflow_run(run_id).state == "cancelled"
    assert dispatches(app, run_id) == 0


def test_an_idempotency_key_returns_the_same_delayed_run(app: FlowForge) -> None:
    first = app.submit_workflow_run(DIAMOND, idempotency_key="nightly", start_at=LATER)
    again = app.submit_workflow_run(DIAMOND, idempotency_key="nightly", start_at=SOON)
    now = app.submit_workflow_run(DIAMOND, idempotency_key="nightly")
    assert (first.created, again.created, now.created) == (True, False, False)
    assert first.run_id == again.run_id == now.run_id
    # The first submit's start time stands.
    assert app.get_workflow_run(first.run_id).start_at == (
        app.get_workflow_run(first.run_id).created_at + LATER
    )
    assert len(app.recent_runs()) == 1


def test_two_schedulers_racing_to_start_a_due_run_start_it_once(app: FlowForge) -> None:
    runs = [app.start_workflow_run(DIAMOND, start_at=SOON) for _ in range(3)]
    wait_for_start_time(app, runs[-1])

    race(app.schedule_once, app.schedule_once)

    for run_id in runs:
        edges = Counter(e.transition for e in app.run_history(run_id))
        assert edges["start"] == 1, edges
        assert edges["dependencies_satisfied"] == 1, edges  # a, promoted once
        assert len(app.dispatches_of(task_id(app, run_id, "a"))) == 1
        assert app.get_workflow_run(run_id).state == "running"


def test_an_advance_racing_a_cancel_of_a_due_run_ends_it_one_way(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND, start_at=SOON)
    wait_for_start_time(app, run_id)

    race(lambda: app.advance_workflow_run(run_id), lambda: app.cancel_workflow_run(run_id))

    assert app.get_workflow_run(run_id).state == "cancelled"
    assert set(states(app, run_id).values()) == {"cancelled"}
    edges = [e.transition for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"]
    assert edges in (["create", "cancel_before_start"], ["create", "start", "cancel"])


def test_the_rebuild_reproduces_delayed_runs_exactly(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    request: pytest.FixtureRequest,
) -> None:
    started = app.start_workflow_run(DIAMOND, start_at=SOON)
    waiting = app.start_workflow_run(DIAMOND, start_at=LATER)
    cancelled = app.start_workflow_run(DIAMOND, start_at=LATER)
    app.cancel_workflow_run(cancelled)
    wait_for_start_time(app, started)
    app.schedule_once()
    run_to_end(app, channel, worker, started)

    before = raw_rows(app, request)
    app.rebuild_projections()
    after = raw_rows(app, request)

    assert differences(before, after) == []
    assert before == after
    delayed = [r for r in after["workflow_runs"] if r["start_at"] is not None]
    assert len(delayed) == 3  # not vacuous
    assert app.get_workflow_run(waiting).state == "pending"
    assert_log_agrees_with_rows(app)


def test_a_task_moved_by_hand_before_its_runs_start_time_is_a_lost_race(
    app: FlowForge,
) -> None:
    """The start time is a guard of ``dependencies_satisfied`` too, in its conditional
    write: before it, a hand's move matches no row (``False``, nothing written, nothing
    dispatched); once the database's clock has passed it, the same move is taken."""
    run_id = app.start_workflow_run(DIAMOND, start_at=LATER)
    a = task_id(app, run_id, "a")

    assert app.transition_task_run(a, "dependencies_satisfied") is False

    assert states(app, run_id)["a"] == "pending"
    assert app.dispatches_of(a) == []
    assert app.get_task_run(a).version == 1
    soon = app.start_workflow_run(DIAMOND, start_at=SOON)
    wait_for_start_time(app, soon)
    assert app.transition_task_run(task_id(app, soon, "a"), "dependencies_satisfied") is True
    assert states(app, soon)["a"] == "ready"
