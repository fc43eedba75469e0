"""The handlers of examples/mapped.toml: a list, one task per element, a reduce."""

from __future__ import annotations

from typing import Any

from flowforge.processes.registry import TaskContext, task


@task("list_files")
def list_files(ctx: TaskContext) -> list[str]:
    count = int(ctx.inputs.get("count", 5))
    return [f"file-{i}.csv" for i in range(count)]


@task("process_file")
def process_file(ctx: TaskContext) -> dict[str, Any]:
    if ctx.index == 1 and ctx.attempt == 1:
        raise RuntimeError(f"{ctx.item}: transient read error")  # retried on its own
    return {"file": ctx.item, "index": ctx.index, "rows": len(str(ctx.item)) * 10}


@task("summarize")
def summarize(ctx: TaskContext) -> dict[str, Any]:
    processed = ctx.upstream["process"]  # every element's result, in index order
    return {"files": [p["file"] for p in processed], "rows": sum(p["rows"] for p in processed)}
