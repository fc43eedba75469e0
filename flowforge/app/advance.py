"""``advance_workflow_run``: one run's scheduling work, in one transaction.

Start the run; promote pending tasks whose dependencies all succeeded; schedule retries
(with the definition's backoff) for failed tasks that have attempts left, and make them
ready once due; derive the run's state; once the run is terminal, cancel what can no
longer run. Every step is a conditional write, so several schedulers may advance the
same run at once: a step another scheduler already took matches no row and is skipped.

Lock order, to rule out deadlocks: the run row first (``lock_workflow_run``: one advance
of a run at a time), then task rows in id order. A worker's finish and the reaper touch
one task row each; a user's cancel touches only the run row; a rebuild locks
workflow_runs before task_runs. This lock serialises the scheduler's multi-row
transaction per run; it is not on the transition path, where every command is still
one conditional write that the database decides.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from flowforge import errors
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.rules import derive_workflow_run_state
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import ACTOR_SCHEDULER
from flowforge.app.results import AdvanceResult
from flowforge.app.writer import Writer
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow

_T = TaskRunState
#: The run edge that records each terminal derived state.
_FINISH_RUN = {
    WorkflowRunState.SUCCEEDED: WORKFLOW_RUN_MACHINE.get("succeed"),
    WorkflowRunState.FAILED: WORKFLOW_RUN_MACHINE.get("fail"),
    WorkflowRunState.CANCELLED: WORKFLOW_RUN_MACHINE.get("cancel"),
}
_PROMOTE = TASK_RUN_MACHINE.get("dependencies_satisfied")
#: How a terminal run cancels a leftover task, by the task's state.
_CANCEL_LEFTOVER = {
    _T.PENDING: TASK_RUN_MACHINE.get("cancel_pending"),
    _T.READY: TASK_RUN_MACHINE.get("cancel_ready"),
    _T.RUNNING: TASK_RUN_MACHINE.get("cancel_running"),
}


def advance(writer: Writer, run_id: UUID, rand: Callable[[], float]) -> AdvanceResult:
    result = AdvanceResult(run_id)
    run = load_run(writer, run_id, lock=True)
    if run.run_state is WorkflowRunState.PENDING:
        started = writer.take_run_edge(
            WORKFLOW_RUN_MACHINE.get("start"), run_id, actor=ACTOR_SCHEDULER
        )
        result.started = started is not None
        run = started or load_run(writer, run_id)
    now = writer.now()
    if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        _cancel_leftovers(writer, _tasks(writer, run_id), now, result)
        return result
    definition = WorkflowDefinition.model_validate(run.definition)
    _step_tasks(writer, _tasks(writer, run_id), definition, now, rand, result)
    _finish_if_derived(writer, run, now, result)
    return result


def load_run(writer: Writer, run_id: UUID, *, lock: bool = False) -> WorkflowRunRow:
    run = writer.store.lock_run(run_id) if lock else writer.store.workflow_run(run_id)
    if run is None:
        raise errors.UnknownRunError(f"no workflow run {run_id}; list runs with `flowforge runs`")
    return run


def _tasks(writer: Writer, run_id: UUID) -> list[TaskRunRow]:
    return sorted(writer.store.task_runs_of(run_id), key=lambda t: t.id)


def _step_tasks(
    writer: Writer,
    tasks: list[TaskRunRow],
    definition: WorkflowDefinition,
    now: datetime,
    rand: Callable[[], float],
    result: AdvanceResult,
) -> None:
    succeeded = {t.task_key for t in tasks if t.task_state is _T.SUCCEEDED}
    for task in tasks:
        if task.task_state is _T.PENDING and succeeded.issuperset(task.depends_on):
            if writer.move_task(_PROMOTE, task.id, actor=ACTOR_SCHEDULER):
                result.promoted.append(task.task_key)
        elif task.task_state is _T.FAILED and task.attempt < task.max_attempts:
            delay = definition.retry_policy_for(task.task_key).delay_for(task.attempt, rand())
            seconds = delay.total_seconds()
            if writer.schedule_retry(task.id, seconds, actor=ACTOR_SCHEDULER):
                result.retried.append(task.task_key)
        elif (
            task.task_state is _T.RETRYING
            and _is_due(task.retry_due_at, now)
            and writer.retry_ready(task.id, actor=ACTOR_SCHEDULER)
        ):
            result.made_ready.append(task.task_key)


def _is_due(due_at: datetime | None, now: datetime) -> bool:
    return due_at is None or due_at <= now


def _finish_if_derived(
    writer: Writer, run: WorkflowRunRow, now: datetime, result: AdvanceResult
) -> None:
    # Re-read: a step above may have lost to another writer, whose change we must see
    # (its row lock made us wait for its commit) before deriving the run's state.
    tasks = _tasks(writer, run.id)
    derived = derive_workflow_run_state(_effective_state(t) for t in tasks)
    edge = _FINISH_RUN.get(derived)
    if edge is None or run.run_state is not WorkflowRunState.RUNNING:
        return
    if writer.take_run_edge(edge, run.id, actor=ACTOR_SCHEDULER):
        result.finished_as = derived.value
        # The run's terminal state is fixed first; cancelling what is left cannot change it.
        _cancel_leftovers(writer, tasks, now, result)


def _effective_state(task: TaskRunRow) -> TaskRunState:
    """A failed task with attempts left is on its way back to ready, not a failure."""
    if task.task_state is _T.FAILED and task.attempt < task.max_attempts:
        return _T.RETRYING
    return task.task_state


def _cancel_leftovers(
    writer: Writer, tasks: list[TaskRunRow], now: datetime, result: AdvanceResult
) -> None:
    """Cancel what can no longer run. A row read before another writer moved it only
    makes its conditional write lose; nothing here needs a fresher read."""
    for task in tasks:
        state = task.task_state
        # No edge leaves retrying but retry_ready: take it, then cancel the ready task.
        if (
            state is _T.RETRYING
            and _is_due(task.retry_due_at, now)
            and writer.retry_ready(task.id, actor=ACTOR_SCHEDULER)
        ):
            state = _T.READY
        edge = _CANCEL_LEFTOVER.get(state)
        if edge is None:
            continue
        if edge.requires_lease:
            cancelled = writer.finish(edge, task.id, task.fencing_token, actor=ACTOR_SCHEDULER)
        else:
            cancelled = writer.move_task(edge, task.id, actor=ACTOR_SCHEDULER)
        if cancelled:
            result.cancelled.append(task.task_key)
