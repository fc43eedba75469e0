"""Stopping `flowforge run`: --timeout is honoured, the first Ctrl-C stops gracefully, the
second at once, and what is printed at the end is what the database holds. Real
subprocesses and real signals; readiness is read from the database, never slept for. On
SQLite and on PostgreSQL (the embedded runner works on both)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cli import Cli
from tests.helpers import wait_until

#: A task that runs until the file named by its input `release` exists.
BLOCKING_MODULE = """
import os
import time

from flowforge import task

WORKFLOW = {"name": "blocking", "lease_seconds": 2, "tasks": [{"key": "wait", "type": "wait"}]}


@task("wait")
def wait(ctx):
    while not os.path.exists(ctx.inputs["release"]):
        time.sleep(0.02)
    return "released"
"""
#: Generous: a loaded CI machine starts Python slowly. What a test bounds is the stop.
STARTUP_S = 15.0
#: Bounds a wait for what the run should reach; polling stops as soon as it does.
WAIT_S = 60.0


@pytest.fixture
def blocking(embedded_cli: Cli) -> tuple[Cli, Path]:
    """The CLI (SQLite or PostgreSQL, no broker) with the blocking workflow's module."""
    (embedded_cli.cwd / "blocking_tasks.py").write_text(BLOCKING_MODULE)
    return embedded_cli, embedded_cli.cwd / "release"


def task_running(cli: Cli) -> bool:
    """Whether the run's task is claimed, as the database says (no run yet: False)."""
    done = cli("runs", "--json")
    runs = json.loads(done.stdout) if done.returncode == 0 else []
    return bool(runs) and runs[0]["task_states"].get("running") == 1


@pytest.fixture
def started(blocking: tuple[Cli, Path]) -> Iterator[tuple[Cli, Path, subprocess.Popen[str], Path]]:
    """`flowforge run` of the blocking workflow, its task running (read from the db)."""
    cli, release = blocking
    log = cli.cwd / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "flowforge", "run", "blocking_tasks:WORKFLOW"),
                *("--input", f"release={release}", "--grace", "60"),
            ],
            cwd=cli.cwd,
            env=cli.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        wait_until(lambda: task_running(cli), WAIT_S, "the task to be claimed")
        yield cli, release, process, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def first_ctrl_c(process: subprocess.Popen[str], log: Path) -> None:
    """SIGINT, then wait for the process to say it is stopping and how to hurry it."""
    process.send_signal(signal.SIGINT)
    message = "stopping (SIGINT); waiting up to 60s for wait to finish (press Ctrl-C again"
    wait_until(lambda: message in log.read_text(), WAIT_S, "the stop message")


def run_state(cli: Cli) -> str:
    (run,) = cli.json("runs")
    return str(run["state"])


def resume_as_printed(cli: Cli, release: Path, output: str) -> None:
    """Run the `flowforge run --resume ...` the output says finishes the run, with its
    task released: the reaper reclaims the abandoned attempt, and the run succeeds."""
    (command,) = [part for part in output.split("`") if " run --resume " in part]
    # The program as printed: `flowforge`, or this installation's script when the PATH
    # does not find one (cli/common.program_name); the rest is what is run.
    assert Path(shlex.split(command)[0]).name == "flowforge", command
    release.touch()
    resumed = cli(*shlex.split(command)[1:])
    assert resumed.returncode == 0, resumed.stderr
    assert run_state(cli) == "succeeded"


def test_run_timeout_stops_within_the_grace_and_prints_the_state_in_the_database(
    blocking: tuple[Cli, Path],
) -> None:
    cli, release = blocking
    began = time.monotonic()
    done = cli(
        "run", "blocking_tasks:WORKFLOW", "-i", f"release={release}", "--timeout", "1",
        "--grace", "1",
    )  # fmt: skip
    took = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    assert took < 1 + 1 + STARTUP_S, took  # the task never ends: only the stop can
    assert "stopping (timeout); waiting up to 1s for wait to finish" in done.stderr
    assert run_state(cli) == "running"
    assert "did not finish within 1s (timeout); in the database it is still running" in (
        done.stderr
    )
    assert "wait was left running on w" in done.stderr
    resume_as_printed(cli, release, done.stderr)


def test_the_first_ctrl_c_lets_the_task_in_hand_finish_and_reports_the_database_state(
    started: tuple[Cli, Path, subprocess.Popen[str], Path],
) -> None:
    cli, release, process, log = started
    first_ctrl_c(process, log)
    release.touch()  # the task in hand finishes within the grace
    assert process.wait(timeout=60) == 0, log.read_text()
    output = log.read_text()
    # Its last task succeeded while stopping: the run is succeeded, in the db and here.
    assert run_state(cli) == "succeeded"
    assert "succeeded in" in output.splitlines()[-1]


def test_a_second_ctrl_c_stops_at_once_and_says_how_the_run_is_left(
    started: tuple[Cli, Path, subprocess.Popen[str], Path],
) -> None:
    cli, release, process, log = started
    first_ctrl_c(process, log)
    asked = time.monotonic()
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=60)
    assert time.monotonic() - asked < STARTUP_S  # not the 60 s grace
    output = log.read_text()
    assert code == 130, output
    assert "stopped at once (asked again)" in output
    assert run_state(cli) == "running"
    assert "was stopped (SIGINT); in the database it is still running" in output
    assert "wait was left running on w" in output
    resume_as_printed(cli, release, output)
