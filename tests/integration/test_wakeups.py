"""Event-driven advancement and dispatch, on both backends (docs/architecture.md,
"Wake-ups").

A transition that can change what its run should do next marks the run in its own
transaction; the commit wakes the schedulers (PostgreSQL: NOTIFY to a LISTENing
connection, so these tests give the scheduler its own FlowForge, as another process
would have; SQLite: the process's bell). The scheduler advances only marked runs, and
its periodic pass is the safety net. The periodic pass is disabled here (an interval of
an hour) wherever a test proves that the wake-up alone does the work.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.loop import Stop
from flowforge.processes.outbox_publisher import Publisher
from flowforge.processes.scheduler import Scheduler
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.projections import statements
from flowforge.projections.wakeups import PostgresNotifier, Wakeups
from tests.helpers import marks, one_task, wait_until, work

HOUR = 3600.0
#: How long a test waits for what a wake-up (or a periodic pass) should bring about.
WAIT_S = 10.0
CHAIN = {
    "name": "chain",
    "retry": {"max_attempts": 1},
    "tasks": [
        {"key": "a", "type": "work"},
        {"key": "b", "type": "work", "depends_on": ["a"]},
    ],
}
ONE = one_task("t", retry={"max_attempts": 1})
FLAKY = {
    "name": "flaky",
    "retry": {"max_attempts": 2, "backoff_seconds": 0.2, "jitter": 0.0},
    "tasks": [{"key": "t", "type": "work"}],
}


@pytest.fixture
def other(app: FlowForge) -> Iterator[FlowForge]:
    """The service as another process would have it: on PostgreSQL a second
    FlowForge (its own bells, reached only by NOTIFY); on SQLite the same one (the
    embedded mode runs every loop in one process)."""
    if app.database.dialect == "sqlite":
        yield app
        return
    second = FlowForge(_url(app))
    yield second
    second.close()


def _url(app: FlowForge) -> str:
    location = app.database.location  # host:port/dbname
    return f"postgresql://postgres@{location}"


@contextmanager
def running(loop: Scheduler | Publisher) -> Iterator[Stop]:
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield loop.stop
    finally:
        loop.stop.set("test over")
        thread.join(timeout=10)
        assert not thread.is_alive()


def task_state(app: FlowForge, run_id: UUID, key: str) -> str:
    return next(t.state for t in app.task_runs(run_id) if t.task_key == key)


def test_a_run_is_advanced_by_wake_ups_alone_with_the_periodic_pass_disabled(
    app: FlowForge, other: FlowForge
) -> None:
    scheduler = Scheduler(other, interval=HOUR)
    with running(scheduler):
        run_id = app.start_workflow_run(CHAIN)
        work(app, run_id, "a")  # its claim started the run, its finish promoted b
        assert task_state(app, run_id, "b") == "ready"
        work(app, run_id, "b", "fail")  # for good: marked, only a scheduler ends the run
        wait_until(lambda: app.get_workflow_run(run_id).state == "failed", WAIT_S, "run finished")
    assert marks(app) == 0


def test_a_retry_falls_due_without_waiting_for_the_periodic_pass(
    app: FlowForge, other: FlowForge
) -> None:
    with running(Scheduler(other, interval=HOUR)):
        run_id = app.start_workflow_run(FLAKY)
        work(app, run_id, "t", "fail")
        # retried on the wake-up, made ready when the scheduler's timer (0.2 s) fires
        wait_until(lambda: task_state(app, run_id, "t") == "ready", WAIT_S, "retry made ready")
        work(app, run_id, "t")
        wait_until(
            lambda: app.get_workflow_run(run_id).state == "succeeded", WAIT_S, "run finished"
        )


def test_a_lost_wake_up_is_recovered_by_the_periodic_pass(
    app: FlowForge, other: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    deaf = Wakeups()  # bells nobody rings: every notification is lost
    monkeypatch.setattr(other, "listening", lambda **_: _yielding(deaf))
    scheduler = Scheduler(other, interval=0.3)
    with running(scheduler):
        wait_until(lambda: scheduler._next_pass > 0, WAIT_S, "first pass done")
        run_id = app.start_workflow_run(ONE)
        work(app, run_id, "t", "fail")  # marked; its notification is lost
        wait_until(lambda: app.get_workflow_run(run_id).state == "failed", WAIT_S, "run finished")
    assert marks(app) == 0


@contextmanager
def _yielding(wakeups: Wakeups) -> Iterator[Wakeups]:
    yield wakeups


def test_a_run_is_marked_by_each_change_for_the_scheduler_and_cleared_by_its_advance(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(CHAIN)
    assert marks(app) == 0  # created: its root is dispatched, its first claim starts it
    assert app.get_workflow_run(run_id).state == "pending"
    a = next(t for t in app.task_runs(run_id) if t.task_key == "a")
    claim = app.claim_task_run(a.id, "w", 30)
    assert claim is not None
    assert app.get_workflow_run(run_id).state == "running"
    assert app.renew_lease(a.id, claim.fencing_token, 30)
    assert marks(app) == 0  # a claim or a heartbeat leaves the run nothing to do
    assert app.advance_woken_runs().runs_advanced == 0
    # The finish advanced its running run itself (b promoted): nothing left to mark.
    assert app.finish_task_run(a.id, claim.fencing_token, "succeed")
    assert (marks(app), task_state(app, run_id, "b")) == (0, "ready")
    b = next(t for t in app.task_runs(run_id) if t.task_key == "b")
    claim = app.claim_task_run(b.id, "w", 30)
    assert claim is not None
    # A failure for good is the whole run's business: marked for the scheduler.
    error = {"type": "Boom", "message": "boom"}
    assert app.finish_task_run(b.id, claim.fencing_token, "fail", error=error)
    assert marks(app) == 1
    summary = app.advance_woken_runs()
    assert (summary.runs_advanced, summary.runs_finished) == (1, 1)
    assert marks(app) == 0
    assert app.get_workflow_run(run_id).state == "failed"


def test_a_cancelled_run_is_woken_and_its_leftovers_cancelled(app: FlowForge) -> None:
    run_id = app.start_workflow_run(CHAIN)
    assert app.transition_workflow_run(run_id, "cancel_before_start")
    assert marks(app) == 1
    assert app.advance_woken_runs().cancelled == 2
    assert {t.state for t in app.task_runs(run_id)} == {"cancelled"}


def test_a_commit_that_leaves_work_rings_this_process_bells(app: FlowForge) -> None:
    bells = app.store.wakeups
    bells.runs.wait(0)
    bells.outbox.wait(0)
    run_id = app.start_workflow_run(ONE)  # an outbox row, no mark
    assert bells.outbox.wait(0) and not bells.runs.wait(0)
    assert app.transition_workflow_run(run_id, "cancel_before_start")  # a mark
    assert bells.runs.wait(0)
    assert not bells.runs.wait(0)  # a wait consumes the ring


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_notification_from_another_connection_rings_the_listening_bells(
    app: FlowForge, other: FlowForge
) -> None:
    with other.listening(ready_timeout=10) as bells:
        bells.runs.wait(0)
        bells.outbox.wait(0)
        run_id = app.start_workflow_run(ONE)
        assert bells.outbox.wait(10)
        assert app.transition_workflow_run(run_id, "cancel_before_start")
        assert bells.runs.wait(10)


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_scheduler_skips_a_run_another_is_advancing_and_takes_it_next_time(
    app: FlowForge, other: FlowForge
) -> None:
    held, free = cancelled_runs(app, 2)
    with psycopg.connect(_url(app)) as conn:
        # another scheduler, mid-advance of ``held``: it holds the run row
        conn.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (held,))
        started = time.monotonic()
        summary = other.advance_woken_runs()
        assert time.monotonic() - started < 5  # skipped, not waited for
        assert summary.runs_advanced == 1
        assert task_state(app, free, "t") == "cancelled"
        assert task_state(app, held, "t") == "ready"
        assert marks(app) == 1  # held's mark stays for whoever advances it
    assert other.advance_woken_runs().runs_advanced == 1
    assert task_state(app, held, "t") == "cancelled"
    assert marks(app) == 0


def cancelled_runs(app: FlowForge, count: int) -> list[UUID]:
    """Runs a user cancelled before they started: each marked, its ready task left for
    a scheduler to cancel."""
    runs = [app.start_workflow_run(ONE) for _ in range(count)]
    for run_id in runs:
        assert app.transition_workflow_run(run_id, "cancel_before_start")
    return runs


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_two_schedulers_at_once_advance_every_marked_run_and_clear_every_mark(
    app: FlowForge, other: FlowForge
) -> None:
    runs = cancelled_runs(app, 40)
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def schedule(name: str, service: FlowForge) -> None:
        barrier.wait()
        try:
            results[name] = service.advance_woken_runs(batch=10)
        except Exception as exc:  # pragma: no cover - reported below
            results[name] = exc

    threads = [
        threading.Thread(target=schedule, args=(name, service))
        for name, service in (("one", app), ("two", other))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(isinstance(r, Exception) for r in results.values()), results
    assert marks(app) == 0
    for run_id in runs:  # each leftover cancelled exactly once: created, cancelled
        (task,) = app.task_runs(run_id)
        assert (task.state, app.task_run_aggregate(task.id).version) == ("cancelled", 2)


def test_the_publisher_is_woken_by_an_outbox_row_with_its_poll_disabled(
    app: FlowForge, other: FlowForge
) -> None:
    channel = InMemoryDispatchChannel()
    publisher = Publisher(other, channel.publisher, interval=HOUR)
    with running(publisher):
        app.start_workflow_run(ONE)  # maybe published by the first sweep
        wait_until(lambda: channel.ready_count == 1, WAIT_S, "first dispatch published")
        app.start_workflow_run(ONE)  # the publisher sleeps: only the wake-up publishes it
        wait_until(lambda: channel.ready_count == 2, WAIT_S, "second dispatch published")
    assert app.pending_dispatch_count() == 0


def test_many_runs_started_in_one_call_are_each_created_dispatched_and_woken(
    app: FlowForge,
) -> None:
    run_ids = app.start_workflow_runs(ONE, [{"i": i} for i in range(5)])
    assert len(set(run_ids)) == 5
    assert [app.get_workflow_run(r).inputs for r in run_ids] == [{"i": i} for i in range(5)]
    assert marks(app) == 0  # nothing for a scheduler: each run's first claim starts it
    assert app.pending_dispatch_count() == 5
    assert app.advance_woken_runs().runs_advanced == 0
    assert {app.get_workflow_run(r).state for r in run_ids} == {"pending"}


def test_bad_inputs_anywhere_in_a_batch_start_no_run(app: FlowForge) -> None:
    with pytest.raises(ValueError, match=r"inputs\[1\]"):
        app.start_workflow_runs(ONE, [{"ok": 1}, {"bad": float("nan")}])
    assert app.recent_runs() == []


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_process_that_commits_and_closes_at_once_still_wakes_the_listeners(
    app: FlowForge,
) -> None:
    with app.listening(ready_timeout=10) as bells:
        bells.outbox.wait(0)
        short_lived = FlowForge(_url(app))  # e.g. `flowforge runs start`
        short_lived.start_workflow_run(ONE)
        short_lived.close()
        assert bells.outbox.wait(10)


def _notifications(
    conn: psycopg.Connection[Any], timeout: float, expected: int | None = None
) -> list[str]:
    """The channels of the notifications ``conn`` receives within ``timeout`` (or once
    ``expected`` have come)."""
    return [notify.channel for notify in conn.notifies(timeout=timeout, stop_after=expected)]


def test_a_burst_of_requests_shares_one_notify_and_a_close_sends_what_is_left(
    postgres_url: str,
) -> None:
    # A long interval: the requests below all fall inside it, so without the throttle
    # each would be sent at once (three NOTIFYs), with it the burst waits for the close.
    notifier = PostgresNotifier(lambda: psycopg.connect(postgres_url, autocommit=True), 3600)
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(statements.load("postgres")["listen_run_wakeups"])
        try:
            notifier.request("notify_run_wakeups")  # after a quiet spell: at once
            assert _notifications(listener, 10, 1) == [statements.RUN_WAKEUPS_CHANNEL]
            notifier.request("notify_run_wakeups")
            assert _notifications(listener, 0.5) == []  # held: within the interval
            notifier.request("notify_run_wakeups")
        finally:
            notifier.close()  # on the way out: the held requests go, in one NOTIFY
        assert _notifications(listener, 10, 1) == [statements.RUN_WAKEUPS_CHANNEL]
        assert _notifications(listener, 0.5) == []


class _CountedCondition(threading.Condition):
    """A condition that counts the wake-ups it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def notify(self, n: int = 1) -> None:
        self.wakeups += 1
        super().notify(n)


def test_requests_within_the_interval_do_not_wake_the_notifier_thread(
    postgres_url: str,
) -> None:
    # Every commit requests a NOTIFY; waking the thread for each (a thread switch per
    # commit) cost a committing process ~100 µs of CPU per commit, for nothing while it
    # waits out its interval: only the first request after a NOTIFY wakes it.
    notifier = PostgresNotifier(lambda: psycopg.connect(postgres_url, autocommit=True), 3600)
    condition = notifier._condition = _CountedCondition()
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(statements.load("postgres")["listen_run_wakeups"])
        try:
            notifier.request("notify_run_wakeups")  # wakes it: sent at once
            assert _notifications(listener, 10, 1) == [statements.RUN_WAKEUPS_CHANNEL]
            for _ in range(10):  # the first wakes it into the interval; the rest wait
                notifier.request("notify_run_wakeups")
            assert condition.wakeups == 2
        finally:
            notifier.close()  # the held requests still go, in one NOTIFY
        assert _notifications(listener, 10, 1) == [statements.RUN_WAKEUPS_CHANNEL]
