"""The scheduler's cancels of a run's tasks that can no longer run: the leftovers of a
run that ended (docs/execution-model.md, "A run ends whole") and, under
``on_failure = "finish_branches"``, the dependants of a task failed for good
(upstream_failed). Each records its cause when another task's failure is the reason
(``aggregates.cancel_cause``). Part of the advance (``advance.py``).
"""

from __future__ import annotations

from uuid import UUID

from flowforge.aggregates.cancel_cause import UPSTREAM_FAILED, CancelCause, failed_upstream
from flowforge.aggregates.machines import TASK_RUN_MACHINE, Transition
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import ACTOR_SCHEDULER
from flowforge.app.results import AdvanceResult
from flowforge.projections.tables import TaskRunRow
from flowforge.projections.writes import Writes

_T = TaskRunState

#: How a terminal run cancels a leftover task, by the task's state: every unfinished
#: task, a failed one waiting for its retry included (docs/execution-model.md, "A run
#: ends whole"). A task that failed for good is no leftover: it stays failed, the reason
#: its run failed.
_CANCEL_LEFTOVER = {
    _T.PENDING: TASK_RUN_MACHINE.get("cancel_pending"),
    _T.READY: TASK_RUN_MACHINE.get("cancel_ready"),
    _T.RUNNING: TASK_RUN_MACHINE.get("cancel_running"),
    _T.FAILED: TASK_RUN_MACHINE.get("cancel_failed"),
    _T.RETRYING: TASK_RUN_MACHINE.get("cancel_retrying"),
}
#: The states a task downstream of a failure can be in while its run goes on (it is
#: promoted only once all its dependencies succeeded): what upstream_failed cancels.
_NEVER_PROMOTED = frozenset({_T.PENDING, _T.READY})


def cancel_leftovers(
    writes: Writes, run_id: UUID, result: AdvanceResult, cause: CancelCause | None
) -> None:
    """Cancel what can no longer run, each task in the run's own transaction. Every
    unfinished task's row is locked first, in id order, and read as it is: a cancel that
    frees a concurrency limit's slot locks a counter row, and every writer takes task rows
    before counter rows (docs/scheduling/limits.md, "Deadlocks"); locked, no row can move
    under the cancels. Running tasks first, by type: the counter rows in one order.
    ``cause``: the run failed (fail-fast), recorded in each cancel of a task that has no
    error of its own (a failed or retrying task keeps its attempt's)."""
    error = cause.error() if cause else None
    for row in sorted(writes.tasks.lock_unfinished_of_run(run_id), key=_cancel_order):
        edge = _leftover_cancel(row)
        if edge is None:
            continue
        if edge.requires_lease:
            cancelled = writes.tasks.finish(
                row.id, edge, row.fencing_token, actor=ACTOR_SCHEDULER, error=error
            )
        else:
            own = row.task_state in _NEVER_PROMOTED
            cancelled = writes.tasks.move(
                row.id, edge, actor=ACTOR_SCHEDULER, error=error if own else None
            )
        if cancelled:
            result.cancelled.append(row.task_key)


def cancel_upstream_failed(
    writes: Writes,
    tasks: list[TaskRunRow],
    blocked: frozenset[str],
    failures: tuple[list[str], dict[str, tuple[str, ...]]],
    result: AdvanceResult,
) -> None:
    """Under finish_branches, while the run goes on: cancel the tasks downstream of a
    task failed for good (upstream_failed), in id order (the lock order). They can never
    run, and none of them can hold a lease: a task is promoted only when all its
    dependencies succeeded. ``why`` tells these cancels from a user's by the run's
    policy and the failed task upstream (docs/execution-model.md); each cancel records
    it too (``failures``: the tasks failed for good, in the definition's order, and
    each task's dependencies)."""
    failed, dependencies = failures
    for task in tasks:
        if task.task_key not in blocked or task.task_state not in _NEVER_PROMOTED:
            continue
        upstream = failed_upstream(task.task_key, failed, dependencies) or failed[0]
        error = CancelCause(UPSTREAM_FAILED, upstream).error()
        edge = _CANCEL_LEFTOVER[task.task_state]
        if writes.tasks.move(task.id, edge, actor=ACTOR_SCHEDULER, error=error):
            result.cancelled.append(task.task_key)


def _cancel_order(task: TaskRunRow) -> tuple[bool, str]:
    return task.task_state is not _T.RUNNING, task.task_type


def _leftover_cancel(task: TaskRunRow) -> Transition | None:
    """The edge that cancels ``task`` as a leftover of its ended run; ``None`` for a
    task that is finished (succeeded, cancelled, or failed for good)."""
    if task.task_state is _T.FAILED and task.attempt >= task.max_attempts:
        return None
    return _CANCEL_LEFTOVER.get(task.task_state)
