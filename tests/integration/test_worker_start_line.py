"""The worker's start line (issue #49): the types it consumes (`--types`), and, when its
id still holds tasks, that it starts again after its process ended with them in hand."""

from __future__ import annotations

import logging
import threading

import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import LEASE_S, Recorder, one_task, task_id


def started(worker: Worker, caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """Run ``worker`` (stopped before it starts: only its start and stop) on a thread of
    its own (no signal handlers), and return its start line."""
    worker.stop.set("test")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flowforge.processes.worker"):
        thread = threading.Thread(target=worker.run)
        thread.start()
        thread.join(30)
    (line,) = [r for r in caplog.records if r.getMessage().startswith("worker started")]
    return line


def test_the_start_line_lists_only_the_types_the_worker_consumes(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder.registry.task("other")(lambda ctx: None)
    worker = Worker(app, channel.consumer, registry=recorder.registry, task_types=["work"])
    line = started(worker, caplog)
    assert line.getMessage() == "worker started"
    assert line.task_types == ["work"]  # type: ignore[attr-defined]
    every = started(Worker(app, channel.consumer, registry=recorder.registry), caplog)
    assert every.task_types == ["other", "work"]  # type: ignore[attr-defined]


def test_a_worker_that_starts_again_holding_a_task_says_its_process_ended_with_it(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_id = app.start_workflow_run(one_task())
    only = task_id(app, run_id, "only")
    # Its process claimed the task, then ended while the handler ran (no finish).
    assert app.claim_task_run(only, "gpu-1", LEASE_S) is not None
    worker = Worker(app, channel.consumer, registry=recorder.registry, worker_id="gpu-1")
    line = started(worker, caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith("worker started again after it stopped with tasks")
    assert line.held_tasks == [f"{run_id}/only"]  # type: ignore[attr-defined]
    assert line.held_attempts == [1]  # type: ignore[attr-defined]
