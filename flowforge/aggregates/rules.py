"""The pure rules of the execution model: run-state derivation and initial task state."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from flowforge.aggregates.on_failure import OnFailure
from flowforge.aggregates.states import TaskRunState, WorkflowRunState

#: The task states from which a task can still run (or is running).
_CAN_RUN = frozenset(
    {TaskRunState.PENDING, TaskRunState.READY, TaskRunState.RUNNING, TaskRunState.RETRYING}
)


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


def derive_run_state(
    on_failure: OnFailure,
    task_states: Mapping[str, TaskRunState],
    depends_on: Mapping[str, Collection[str]],
) -> WorkflowRunState:
    """A run's state under its definition's ``on_failure`` policy: ``task_states`` by
    task key (a failed task with attempts left passed as ``RETRYING``, as for
    :func:`derive_workflow_run_state`), ``depends_on`` each task's direct dependencies."""
    if on_failure is OnFailure.FAIL_FAST:
        return derive_workflow_run_state(task_states.values())
    return derive_finishing_branches(task_states, depends_on)


def derive_finishing_branches(
    task_states: Mapping[str, TaskRunState], depends_on: Mapping[str, Collection[str]]
) -> WorkflowRunState:
    """The run's state under ``on_failure = "finish_branches"`` (an extension of the
    spec's precedence, docs/execution-model.md).

    With no task failed for good it is the spec's derivation, unchanged. Otherwise the
    tasks downstream of a failure (:func:`downstream_of_failures`) no longer count: they
    can never run, and the advance cancels them (upstream_failed). Of the others:

    1. any cancelled -> cancelled (a user's decision wins, as in the spec);
    2. else any that can still run (pending, ready, running, retrying) -> running: the
       run is never terminal while a branch not downstream of a failure is alive;
    3. else failed: every branch has ended, and one failed.
    """
    states = {key: TaskRunState(state) for key, state in task_states.items()}
    if TaskRunState.FAILED not in states.values():
        return derive_workflow_run_state(states.values())
    blocked = downstream_of_failures(states, depends_on)
    counted = [state for key, state in states.items() if key not in blocked]
    if TaskRunState.CANCELLED in counted:
        return WorkflowRunState.CANCELLED
    if any(state in _CAN_RUN for state in counted):
        return WorkflowRunState.RUNNING
    return WorkflowRunState.FAILED


def downstream_of_failures(
    task_states: Mapping[str, TaskRunState], depends_on: Mapping[str, Collection[str]]
) -> frozenset[str]:
    """The tasks that depend, directly or through others, on a task failed for good
    (``FAILED``): under finish_branches, the ones cancelled as upstream_failed."""
    failed = {key for key, state in task_states.items() if state is TaskRunState.FAILED}
    return downstream_of(failed, depends_on)


def downstream_of(
    roots: Collection[str], depends_on: Mapping[str, Collection[str]]
) -> frozenset[str]:
    """The tasks that depend on one of ``roots``, directly or transitively (the roots
    themselves not included, unless one depends on another)."""
    dependents: dict[str, list[str]] = {}
    for key, dependencies in depends_on.items():
        for dependency in dependencies:
            dependents.setdefault(dependency, []).append(key)
    found: set[str] = set()
    stack = list(roots)
    while stack:
        for dependent in dependents.get(stack.pop(), ()):
            if dependent not in found:
                found.add(dependent)
                stack.append(dependent)
    return frozenset(found)


def initial_task_run_state(dependency_count: int) -> TaskRunState:
    """``ready`` for a task with no dependencies, ``pending`` otherwise.

    This is how the first tasks of a DAG become eligible without a separate kickoff.
    """
    if dependency_count < 0:
        raise ValueError(f"dependency_count must be >= 0, got {dependency_count}")
    return TaskRunState.READY if dependency_count == 0 else TaskRunState.PENDING
