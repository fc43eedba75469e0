"""Each attempt's output (issue #49): what its handler prints and logs while it runs is
stored with the attempt, apart from every other task's, on both backends."""

from __future__ import annotations

import logging
import sys
from typing import Any

from flowforge.app.service import FlowForge
from flowforge.processes import capture
from flowforge.processes.registry import TaskContext
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import Recorder, handle_next, one_task, task_id, wait_until

RETRIED = one_task(retry={"max_attempts": 2, "backoff_seconds": 0, "jitter": 0.0})
handler_log = logging.getLogger("tests.handler")


def deliver_one(app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker) -> str:
    app.publish_pending_dispatches(channel.publisher())
    return handle_next(channel, worker)


def make_worker(app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder) -> Worker:
    return Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-logs")


def test_each_attempt_keeps_what_its_handler_printed_and_logged(
    app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder
) -> None:
    logging.getLogger().setLevel(logging.INFO)
    worker = make_worker(app, channel, recorder)

    def behaviour(ctx: TaskContext) -> Any:
        print(f"printed in attempt {ctx.attempt}")
        print(f"to stderr in attempt {ctx.attempt}", file=sys.stderr)
        handler_log.info("logged in attempt %d", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"ok": True}

    recorder.behaviour["only"] = behaviour
    run_id = app.start_workflow_run(RETRIED)
    assert deliver_one(app, channel, worker) == "fail"
    wait_until(
        lambda: app.schedule_once() is not None and app.pending_dispatch_count() > 0,
        10,
        "the retry was never dispatched",
    )
    assert deliver_one(app, channel, worker) == "succeed"

    logs = app.attempt_logs(task_id(app, run_id, "only"))
    assert [log.attempt for log in logs] == [1, 2]
    for log in logs:
        n = log.attempt
        assert f"printed in attempt {n}\n" in log.output
        assert f"to stderr in attempt {n}\n" in log.output
        assert f"INFO tests.handler: logged in attempt {n}\n" in log.output
        assert f"attempt {3 - n}" not in log.output  # only its own attempt's lines
        assert (log.worker_id, log.truncated) == ("w-logs", False)
    assert [log.attempt for log in app.attempt_logs(logs[0].task_run_id, attempt=2)] == [2]


def test_a_handler_that_prints_nothing_stores_nothing(
    app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder
) -> None:
    worker = make_worker(app, channel, recorder)
    run_id = app.start_workflow_run(one_task())
    assert deliver_one(app, channel, worker) == "succeed"
    assert app.attempt_logs(task_id(app, run_id, "only")) == []


def test_an_attempts_output_is_bounded_and_says_what_it_dropped(
    app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder
) -> None:
    worker = make_worker(app, channel, recorder)

    def behaviour(ctx: TaskContext) -> None:
        print("FIRST LINE")
        for i in range(20_000):
            print(f"line {i:05d} of a handler that prints too much")
        print("LAST LINE")

    recorder.behaviour["only"] = behaviour
    run_id = app.start_workflow_run(one_task())
    assert deliver_one(app, channel, worker) == "succeed"
    (log,) = app.attempt_logs(task_id(app, run_id, "only"))
    assert log.output.startswith("FIRST LINE\n")
    assert log.output.endswith("LAST LINE\n")
    assert log.truncated
    notice = capture.truncation_notice(log.dropped_chars)
    assert notice in log.output
    assert len(log.output) == capture.MAX_OUTPUT_CHARS + len(notice)
    printed = len("FIRST LINE\n") + 20_000 * len("line 00000 of a handler that prints too much\n")
    assert log.dropped_chars == printed + len("LAST LINE\n") - capture.MAX_OUTPUT_CHARS


def test_output_outside_a_handler_goes_where_it_went(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    capsys: Any,
) -> None:
    worker = make_worker(app, channel, recorder)
    recorder.behaviour["only"] = lambda ctx: print("inside")
    run_id = app.start_workflow_run(one_task())
    assert deliver_one(app, channel, worker) == "succeed"
    print("outside")  # this thread runs no attempt
    out = capsys.readouterr().out
    assert "outside" in out and "inside" not in out
    (log,) = app.attempt_logs(task_id(app, run_id, "only"))
    assert log.output == "inside\n"
