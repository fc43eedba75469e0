"""The demo's workflow and handlers: ``examples/fan_out.toml`` and ``examples/tasks.py``,
shipped inside the package so ``flowforge demo`` works from any directory and from an
installed wheel (which has no ``examples/``). A test keeps the two definitions equal.

The handlers sleep a little so the live progress has something to show; ``enrich``
fails on its first attempt and succeeds on the retry, as the example's does.
"""

from __future__ import annotations

import time
from typing import Any

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.processes.registry import TaskContext, TaskRegistry

#: Seconds each handler takes: long enough to watch, short enough not to wait for.
WORK_S = 0.15

DEFINITION = WorkflowDefinition.model_validate(
    {
        "name": "fan_out",
        "description": "extract -> (clean, enrich, score) -> load",
        "lease_seconds": 10.0,
        "retry": {"max_attempts": 3, "backoff_seconds": 0.5, "backoff_cap_seconds": 5.0},
        "tasks": [
            {"key": "extract", "type": "extract"},
            {"key": "clean", "type": "clean", "depends_on": ["extract"]},
            {"key": "enrich", "type": "enrich", "depends_on": ["extract"]},
            {"key": "score", "type": "score", "depends_on": ["extract"]},
            {"key": "load", "type": "load", "depends_on": ["clean", "enrich", "score"]},
        ],
    }
)
INPUTS: dict[str, Any] = {"rows": 8}

#: Its own registry, not ``default_registry``: a process that imported
#: ``examples.tasks`` too would otherwise register each type twice.
REGISTRY = TaskRegistry()


@REGISTRY.task("extract")
def extract(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(WORK_S)
    return {"records": list(range(int(ctx.inputs.get("rows", 5))))}


@REGISTRY.task("clean")
def clean(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(WORK_S)
    return {"records": [r for r in ctx.upstream["extract"]["records"] if r % 2 == 0]}


@REGISTRY.task("enrich")
def enrich(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(WORK_S)
    if ctx.attempt == 1:
        raise ConnectionError("enrichment service timed out (first attempt fails on purpose)")
    return {"enriched": len(ctx.upstream["extract"]["records"]), "attempt": ctx.attempt}


@REGISTRY.task("score")
def score(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(WORK_S)
    return {"score": sum(ctx.upstream["extract"]["records"])}


@REGISTRY.task("load")
def load(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(WORK_S)
    return {
        "loaded": len(ctx.upstream["clean"]["records"]),
        "score": ctx.upstream["score"]["score"],
        "enriched": ctx.upstream["enrich"]["enriched"],
    }
