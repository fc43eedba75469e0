"""The handler of examples/limits.toml: a call to a slow shared service."""

from __future__ import annotations

import time
from typing import Any

from flowforge.processes.registry import TaskContext, task

#: How long one call takes: long enough that, unlimited, four workers would overlap.
CALL_S = 0.3


@task("call_api")
def call_api(ctx: TaskContext) -> dict[str, Any]:
    time.sleep(CALL_S)
    return {"called": ctx.task_key}
