"""The no-op handler the end-to-end benchmark's workers import (``--tasks bench.noop_tasks``)."""

from __future__ import annotations

from flowforge import TaskContext, task


@task("noop")
def noop(ctx: TaskContext) -> None:
    """Does nothing: the benchmark measures FlowForge, not the work."""
