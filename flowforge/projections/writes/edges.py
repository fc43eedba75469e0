"""The machines' edges the writes name, looked up once (an unknown name fails at import)."""

from __future__ import annotations

from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import TaskRunState

CLAIM = TASK_RUN_MACHINE.get("claim")
SCHEDULE_RETRY = TASK_RUN_MACHINE.get("schedule_retry")
RETRY_READY = TASK_RUN_MACHINE.get("retry_ready")
SUCCEED_TASK = TASK_RUN_MACHINE.get("succeed")
FAIL_TASK = TASK_RUN_MACHINE.get("fail")
START_RUN = WORKFLOW_RUN_MACHINE.get("start")
SUCCEED_RUN = WORKFLOW_RUN_MACHINE.get("succeed")
#: A running task's state as the rows hold it.
RUNNING = TaskRunState.RUNNING.value
