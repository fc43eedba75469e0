"""Rerunning a finished run: which tasks carry their result over, which run again.

A rerun is a new run of the same definition and inputs. A task of the old run is
*carried over* (its result copied into the new run by the ``carry_over`` edge, its
handler not run) iff it succeeded in the old run AND it is neither one of the tasks
named to run again (``--from``) nor downstream of one, transitively. Every other task
runs again from scratch. Two consequences the property tests check:

- the carried-over tasks are closed upstream: a carried task's dependencies all
  succeeded (it ran after them) and none is named or downstream of a named task (else
  the task would be downstream too), so each is carried over as well. A new run's
  carried results are therefore exactly the results its handlers would have seen;
- a task that runs again is ready at once when every dependency is carried over, since
  a carried-over task is succeeded: the readiness rule (``initial_task_run_state``)
  counts only the dependencies that run again.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from flowforge import errors
from flowforge.aggregates import dag, mapping
from flowforge.aggregates.definition import TaskDefinition, WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.rules import initial_task_run_state
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import Provenance


@dataclass(frozen=True, slots=True)
class CarriedResult:
    """A succeeded task's result and where it was really produced."""

    result: Any
    source: Provenance


def downstream(definition: WorkflowDefinition, keys: Iterable[str]) -> frozenset[str]:
    """``keys`` and every task that depends on one of them, transitively."""
    found: set[str] = set()
    todo = list(keys)
    while todo:
        key = todo.pop()
        if key not in found:
            found.add(key)
            todo.extend(definition.dependents(key))
    return frozenset(found)


def carried_over(
    definition: WorkflowDefinition, succeeded: Collection[str], from_tasks: Collection[str]
) -> frozenset[str]:
    """The tasks a rerun carries over: succeeded, and neither in ``from_tasks`` nor
    downstream of one (the module's rule)."""
    again = downstream(definition, from_tasks)
    found = {t.key for t in definition.tasks if t.key in succeeded and t.key not in again}
    # A mapped task's elements (``mapping``): each carried over when its mapped task's
    # upstream is (the rerun expands the same list) and neither it nor its mapped task
    # runs again; the others run again, ready at once.
    for key in succeeded:
        element = mapping.element_of(key)
        if element is None or key in again or element[0] in again:
            continue
        if definition.task(element[0]).map_over in found:
            found.add(key)
    return frozenset(found)


def initial_state(task: TaskDefinition, carried: Collection[str]) -> TaskRunState:
    """A task that runs again starts ready when every dependency is carried over: a
    carried-over task has succeeded, as far as readiness goes."""
    return initial_task_run_state(sum(d not in carried for d in task.depends_on))


@dataclass(frozen=True, slots=True)
class RerunPlan:
    """What a rerun creates: the results it carries over, by task key (every other
    task runs again)."""

    rerun_of: UUID
    carried: Mapping[str, CarriedResult]

    def initial_state(self, task: TaskDefinition) -> TaskRunState:
        """The state a task that runs again is created in."""
        return initial_state(task, self.carried.keys())


def plan(
    run_id: UUID,
    run_state: WorkflowRunState,
    definition: WorkflowDefinition,
    succeeded: Mapping[str, CarriedResult],
    from_tasks: Collection[str],
) -> RerunPlan:
    """The rerun of run ``run_id`` (in ``run_state``; ``succeeded``: its succeeded
    tasks' results and provenance), running again ``from_tasks`` and what follows them
    and every task that did not succeed.

    ``UnknownTaskKeyError`` for a key of ``from_tasks`` the workflow lacks;
    ``RunNotFinishedError`` unless the run is terminal; ``NothingToRerunError`` if no
    task would run again."""
    known = {t.key for t in definition.tasks}
    named = dict.fromkeys(from_tasks)
    if unknown := [key for key in named if mapping.mapped_task_of(key) not in known]:
        raise errors.UnknownTaskKeyError(
            f"run {run_id} (workflow {definition.name!r}) has no task "
            f"{', '.join(repr(k) for k in unknown)} to run again; its task keys are: "
            f"{dag.keys(definition.tasks)}"
        )
    if not WORKFLOW_RUN_MACHINE.is_terminal(run_state):
        raise errors.RunNotFinishedError(
            f"run {run_id} is {run_state.value}: only a finished run can be rerun. Wait "
            f"for it to end (`flowforge status {run_id} --watch`) or cancel it "
            f"(`flowforge cancel {run_id}`), then rerun it"
        )
    carried = carried_over(definition, succeeded.keys(), from_tasks)
    if all(k in carried for k in _would_create(definition, succeeded, carried, named)):
        raise errors.NothingToRerunError(
            f"every task of run {run_id} succeeded, so a rerun would run nothing: name "
            f"the tasks to run again (`flowforge rerun {run_id} --from TASK`); they and "
            f"every task downstream of them run again, the others' results are carried over"
        )
    return RerunPlan(run_id, {key: succeeded[key] for key in carried})


def _would_create(
    definition: WorkflowDefinition,
    succeeded: Mapping[str, CarriedResult],
    carried: Collection[str],
    named: Collection[str],
) -> list[str]:
    """Every task run a rerun would have: the definition's unmapped tasks, the named
    elements, and every element of a mapped task whose list is carried over (one that
    failed or was cancelled is not carried: it runs again, a mapped leaf's too)."""
    found = [t.key for t in definition.tasks if t.map_over is None]
    found += [k for k in named if mapping.element_of(k) is not None]
    for key, over in definition.maps.items():
        if over in carried:
            map_key = definition.task(key).map_key
            found += mapping.element_keys(key, succeeded[over].result, map_key)
    return found
