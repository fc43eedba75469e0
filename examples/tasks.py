"""The handlers of examples/fan_out.toml: trusted code the worker imports (--tasks)."""

from __future__ import annotations

from typing import Any

from flowforge.processes.registry import TaskContext, task


@task("extract")
def extract(ctx: TaskContext) -> dict[str, Any]:
    rows = int(ctx.inputs.get("rows", 5))
    return {"records": list(range(rows))}


@task("clean")
def clean(ctx: TaskContext) -> dict[str, Any]:
    records = ctx.upstream["extract"]["records"]
    return {"records": [r for r in records if r % 2 == 0]}


@task("enrich")
def enrich(ctx: TaskContext) -> dict[str, Any]:
    # Kept with this attempt: `flowforge logs RUN enrich` shows it (docs/logs.md).
    print(f"enriching {len(ctx.upstream['extract']['records'])} records, attempt {ctx.attempt}")
    if ctx.attempt == 1:
        # Fails once on purpose: the retry policy brings it back as attempt 2.
        raise ConnectionError("enrichment service timed out (first attempt fails on purpose)")
    return {"enriched": len(ctx.upstream["extract"]["records"]), "attempt": ctx.attempt}


@task("score")
def score(ctx: TaskContext) -> dict[str, Any]:
    return {"score": sum(ctx.upstream["extract"]["records"])}


@task("load")
def load(ctx: TaskContext) -> dict[str, Any]:
    return {
        "loaded": len(ctx.upstream["clean"]["records"]),
        "score": ctx.upstream["score"]["score"],
        "enriched": ctx.upstream["enrich"]["enriched"],
    }
