"""A worker is never held hostage by its handler, on both backends (in-process channel):
when the lease of the task in hand is lost while its handler hangs (the run cancelled,
the attempt timed out), the worker stops waiting, settles the message and takes the
next task on a fresh thread; past ``max_abandoned`` hung handlers it raises
``HandlersHungError`` so that its process exits and its supervisor restarts it.

The handlers hang on an event the test sets when it is done, so no thread outlives it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import Recorder, handle_next, task_id, wait_until

#: Short, so the heartbeat (every third of it) finds a lost lease within a fraction of
#: a second.
LEASE_S = 0.3
WAIT_S = 30.0


def hung_then_quick(keys: list[str], **fields: Any) -> dict[str, Any]:
    tasks = [{"key": key, "type": "work"} for key in keys]
    return {"name": "hangs", "lease_seconds": LEASE_S, **fields, "tasks": tasks}


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set when the test ends: every hung handler returns then."""
    event = threading.Event()
    yield event
    event.set()


def hang(started: threading.Event, released: threading.Event) -> Any:
    def handler(ctx: TaskContext) -> str:
        started.set()
        released.wait(WAIT_S)
        return "too late"

    return handler


def test_a_cancelled_task_whose_handler_hangs_is_abandoned_and_the_next_task_runs(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    released: threading.Event,
) -> None:
    started = threading.Event()
    recorder.behaviour["stuck"] = hang(started, released)
    stuck_run = app.start_workflow_run(hung_then_quick(["stuck"]))
    worker = Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-hostage")
    app.publish_pending_dispatches(channel.publisher())
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(handle_next(channel, worker)))
    thread.start()
    assert started.wait(WAIT_S)

    assert app.cancel_workflow_run(stuck_run)
    thread.join(WAIT_S)

    assert not thread.is_alive(), "the worker waited for a handler that hangs"
    assert outcome == ["stale"]
    assert channel.unsettled_count == 0  # the message was settled (acked)
    assert worker.abandoned_running == 1
    # The next task runs on a fresh handler thread, while the first still hangs.
    next_run = app.start_workflow_run(hung_then_quick(["quick"]))
    app.publish_pending_dispatches(channel.publisher())
    assert handle_next(channel, worker) == "succeed"
    assert app.get_task_run(task_id(app, next_run, "quick")).result == {"done": "quick"}
    assert app.get_task_run(task_id(app, stuck_run, "stuck")).state == "cancelled"


def test_a_timed_out_attempt_is_abandoned_and_retried_elsewhere(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    released: threading.Event,
) -> None:
    started = threading.Event()
    recorder.behaviour["stuck"] = hang(started, released)
    run_id = app.start_workflow_run(
        {
            **hung_then_quick(["stuck"]),
            "tasks": [{"key": "stuck", "type": "work", "timeout_seconds": 0.2}],
            "retry": {"max_attempts": 2, "backoff_seconds": 0},
        }
    )
    worker = Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-hostage")
    app.publish_pending_dispatches(channel.publisher())
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(handle_next(channel, worker)))
    thread.start()
    assert started.wait(WAIT_S)

    task = task_id(app, run_id, "stuck")
    wait_until(app.time_out_overdue_tasks, WAIT_S, "the attempt never timed out")
    thread.join(WAIT_S)

    assert outcome == ["stale"]
    app.schedule_once()  # the timeout's failure gets its retry
    row = app.get_task_run(task)
    assert (row.state, row.attempt) == ("ready", 2)
    failures = [e.error for e in app.history(task) if e.transition == "fail"]
    assert [(f or {}).get("type") for f in failures] == ["TimedOut"]


def test_past_max_abandoned_hung_handlers_the_worker_raises_so_it_is_restarted(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    released: threading.Event,
) -> None:
    keys = ["a", "b"]
    started = {key: threading.Event() for key in keys}
    for key in keys:
        recorder.behaviour[key] = hang(started[key], released)
    run_ids: dict[str, UUID] = {}
    worker = Worker(
        app, channel.consumer, registry=recorder.registry, worker_id="w-hostage", max_abandoned=1
    )
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # inspected in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    for key in keys:
        run_ids[key] = app.start_workflow_run(hung_then_quick([key]))
        app.publish_pending_dispatches(channel.publisher())
        assert started[key].wait(WAIT_S)
        assert app.cancel_workflow_run(run_ids[key])
    thread.join(WAIT_S)

    assert not thread.is_alive()
    assert [type(f) for f in failures] == [errors.HandlersHungError]
    assert "2 abandoned handlers still running (at most 1)" in str(failures[0])
    assert channel.unsettled_count == 0
