"""Stopping `flowforge worker` (issue #49): the first Ctrl-C says what the stop waits for
and how not to wait; the second stops the worker at once, not after its --grace. A real
worker process on PostgreSQL and RabbitMQ, real signals; readiness read from the
database."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_cli import Cli
from tests.e2e.test_cli_stopping import BLOCKING_MODULE, STARTUP_S, WAIT_S, task_running
from tests.helpers import wait_until


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_a_second_ctrl_c_stops_the_worker_at_once(production: Cli, tmp_path: Path) -> None:
    (production.cwd / "blocking_tasks.py").write_text(BLOCKING_MODULE)
    assert production("db", "init").returncode == 0
    release = tmp_path / "release"
    submitted = production("submit", "blocking_tasks:WORKFLOW", "--input", f"release={release}")
    assert submitted.returncode == 0, submitted.stderr
    log = tmp_path / "worker.log"
    processes = [
        production.popen("scheduler", "--interval", "0.2", log=tmp_path / "scheduler.log"),
        production.popen("publisher", "--interval", "0.1", log=tmp_path / "publisher.log"),
    ]
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "flowforge", "worker", "--tasks", "blocking_tasks"],
            cwd=production.cwd,
            env=production.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: task_running(production), WAIT_S, "the task to be claimed")
        worker.send_signal(signal.SIGINT)
        message = "stopping: waiting up to 30s for 1 handler to finish; Ctrl-C again to stop now"
        wait_until(lambda: message in log.read_text(), WAIT_S, "the stop message")
        asked = time.monotonic()
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=WAIT_S) == 0, log.read_text()
        assert time.monotonic() - asked < STARTUP_S  # not the 30 s grace
        assert "second stop requested: stopping now" in log.read_text()
    finally:
        release.touch()
        for process in [worker, *processes]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=WAIT_S)
