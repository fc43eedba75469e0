"""Handlers for the fault tests, with a side-effect log kept outside the engine.

Every call appends one JSON line to the file named by FLOWFORGE_TEST_SIDE_EFFECTS, so a
test can count how often a handler really ran, in which process, with which token.
A handler named "wait_<x>" blocks until the file "<side effects>.release" exists.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from flowforge.processes.registry import TaskContext, task


def _record(ctx: TaskContext, event: str) -> None:
    path = Path(os.environ["FLOWFORGE_TEST_SIDE_EFFECTS"])
    line = {
        "event": event,
        "pid": os.getpid(),
        "task_key": ctx.task_key,
        "attempt": ctx.attempt,
        "fencing_token": ctx.fencing_token,
        "worker_id": ctx.worker_id,
    }
    with path.open("a") as file:
        file.write(json.dumps(line) + "\n")


def _wait_for_release() -> None:
    release = Path(os.environ["FLOWFORGE_TEST_SIDE_EFFECTS"] + ".release")
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@task("quick")
def quick(ctx: TaskContext) -> dict[str, Any]:
    _record(ctx, "ran")
    return {"pid": os.getpid(), "token": ctx.fencing_token}


@task("paced")
def paced(ctx: TaskContext) -> dict[str, Any]:
    """A short handler: a backlog of them takes the workers several seconds to drain."""
    time.sleep(0.02)
    _record(ctx, "ran")
    return {}


@task("steady")
def steady(ctx: TaskContext) -> dict[str, Any]:
    _record(ctx, "started")
    time.sleep(0.3)
    _record(ctx, "ran")
    return {"pid": os.getpid()}


@task("held")
def held(ctx: TaskContext) -> dict[str, Any]:
    """Runs until released; only the first attempt waits (later ones finish at once)."""
    _record(ctx, "started")
    if ctx.fencing_token == 1:
        _wait_for_release()
    _record(ctx, "ran")
    return {"pid": os.getpid(), "token": ctx.fencing_token}


@task("suicide")
def suicide(ctx: TaskContext) -> dict[str, Any]:
    """Kills its own worker, every attempt (as ``os._exit``, a segfault or the OOM killer
    would): docs/execution-model.md, "A worker lost too often"."""
    _record(ctx, "started")
    os.kill(os.getpid(), signal.SIGKILL)
    return {"unreachable": True}
