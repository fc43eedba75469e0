"""The pure rules of the execution model: run-state derivation and initial task state."""

from __future__ import annotations

from collections.abc import Iterable

from flowforge.aggregates.states import TaskRunState, WorkflowRunState


def derive_workflow_run_state(task_states: Iterable[TaskRunState]) -> WorkflowRunState:
    """A run's state from its tasks' states, with the spec's fixed precedence.

    1. any cancelled -> cancelled: cancellation is a user decision and wins over any
       concurrent outcome;
    2. else any failed -> failed;
    3. else all succeeded -> succeeded (all, not "no failures": an empty run is not
       a success);
    4. else any running -> running;
    5. else pending.

    The caller passes a failed task that still has attempts left as ``RETRYING``: it
    is on its way back to ready, not a failure of the run.
    """
    states = [TaskRunState(s) for s in task_states]
    if TaskRunState.CANCELLED in states:
        return WorkflowRunState.CANCELLED
    if TaskRunState.FAILED in states:
        return WorkflowRunState.FAILED
    if states and all(s is TaskRunState.SUCCEEDED for s in states):
        return WorkflowRunState.SUCCEEDED
    if TaskRunState.RUNNING in states:
        return WorkflowRunState.RUNNING
    return WorkflowRunState.PENDING


def initial_task_run_state(dependency_count: int) -> TaskRunState:
    """``ready`` for a task with no dependencies, ``pending`` otherwise.

    This is how the first tasks of a DAG become eligible without a separate kickoff.
    """
    if dependency_count < 0:
        raise ValueError(f"dependency_count must be >= 0, got {dependency_count}")
    return TaskRunState.READY if dependency_count == 0 else TaskRunState.PENDING
