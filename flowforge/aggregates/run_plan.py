"""A run's plan: everything a run's creation writes, decided in one place (pure).

A run is created three ways: submitted (``submit_workflow_run``, and many at once),
rerun from a finished run (``rerun_workflow_run``) and fired by a cron schedule. Each
builds a :class:`RunPlan` here, from the definition and the request, and the projection
(``projections/writes/runs.py``) writes exactly what the plan's events say, deciding
nothing. What the plan decides:

- every task of the definition, once, in the definition's order, with what its row
  keeps (type, dependencies, attempts, lease, timeout, ``max_running``);
- each task's initial state: ``initial_task_run_state`` (ready without dependencies);
  for a rerun, ``pending`` for a task whose result is carried over (the ``carry_over``
  edge follows its creation) and, for one that runs again, ready once every dependency
  is carried over (``flowforge.aggregates.rerun``); for a delayed run, ``pending`` for
  every task (``flowforge.aggregates.start_time``);
- the start time, from the requested one and the database's clock at the creation
  (which only the projection can read: the plan takes it as ``at``);
- the task types whose concurrency limit needs a counter (``limited_task_types``);
- the run's trace context, for its dispatches to carry (``flowforge.tracing``).

What a dispatch's queue is (routing by task type) is not decided here: it is the
deployment's (``BrokerConfig.queue_for``), at publish time, from the task's type.

The per-task part depends on the definition (and the rerun) only, so a bulk submission
plans its tasks once for all its runs (:func:`submitted_runs`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.aggregates import mapping, start_time, task_run, workflow_run
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.ids import new_id
from flowforge.aggregates.rerun import CarriedResult, RerunPlan
from flowforge.aggregates.rules import initial_task_run_state
from flowforge.aggregates.states import TaskRunState


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """One task run a run's creation makes: its fixed fields, the state it starts in
    when the run starts at once, and the result it carries over (a rerun's), if any."""

    key: str
    type: str
    depends_on: tuple[str, ...]
    max_attempts: int
    lease_seconds: float
    timeout_seconds: float | None
    max_running: int | None
    max_worker_losses: int
    state: TaskRunState
    carried: CarriedResult | None = None
    #: An element of a mapped task (a rerun's, whose upstream is carried over).
    map_index: int | None = None
    map_item: Any = None


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What one run's creation writes (the module says what is decided where)."""

    definition: WorkflowDefinition
    inputs: dict[str, Any]
    idempotency_key: str | None
    actor: str
    tasks: tuple[PlannedTask, ...]
    #: The task types whose limit needs a counter row before any task row is written.
    limited_task_types: tuple[str, ...]
    #: As requested (``start_time.checked``); resolved against the database's clock by
    #: :meth:`run_created`.
    start_at: start_time.StartAt = None
    rerun_of: UUID | None = None
    trace_context: dict[str, str] | None = None

    @property
    def carried(self) -> Mapping[str, CarriedResult]:
        """The carried-over results, by task key (a rerun's; empty otherwise)."""
        return {t.key: t.carried for t in self.tasks if t.carried is not None}

    def traced(self, trace_context: dict[str, str] | None) -> RunPlan:
        """This plan with the context of its creation's span (None: no tracing)."""
        return self if trace_context is None else replace(self, trace_context=trace_context)

    def run_created(self, run_id: UUID, at: datetime) -> workflow_run.WorkflowRun.Created:
        """The run's creation event at ``at`` (the database's clock): its start time is
        the requested one if later than ``at``, else none (``start_time.start_time``)."""
        return workflow_run.created_event(
            run_id,
            at=at,
            workflow_name=self.definition.name,
            definition=self.definition.to_dict(),
            inputs=self.inputs,
            idempotency_key=self.idempotency_key,
            actor=self.actor,
            rerun_of=self.rerun_of,
            start_at=start_time.start_time(self.start_at, at),
            trace_context=self.trace_context,
        )

    def task_events(
        self, run: workflow_run.WorkflowRun.Created
    ) -> Iterator[tuple[task_run.TaskRun.Created, task_run.TaskRun.ResultCarriedOver | None]]:
        """Each task's creation event in the run ``run`` created, in the definition's
        order, with its carry-over event (a rerun's carried task) or None. A delayed
        run (``run.start_at``) creates every task pending."""
        at = run.timestamp
        for task in self.tasks:
            new = task_run.new_task_run(
                new_id(),
                at=at,
                workflow_run_id=run.originator_id,
                task_key=task.key,
                task_type=task.type,
                depends_on=list(task.depends_on),
                max_attempts=task.max_attempts,
                lease_seconds=task.lease_seconds,
                timeout_seconds=task.timeout_seconds,
                max_running=task.max_running,
                max_worker_losses=task.max_worker_losses,
                state=start_time.held_until_start(task.state, run.start_at),
                actor=self.actor,
                map_index=task.map_index,
                map_item=task.map_item,
            )
            if task.carried is not None:
                new.carry_over(task.carried.result, task.carried.source, at=at, actor=self.actor)
            creation, *carry_over = new.collect_events()
            assert isinstance(creation, task_run.TaskRun.Created)
            carried: task_run.TaskRun.ResultCarriedOver | None = None
            for event in carry_over:
                assert isinstance(event, task_run.TaskRun.ResultCarriedOver)
                carried = event
            yield creation, carried


def planned_tasks(
    definition: WorkflowDefinition, rerun: RerunPlan | None = None
) -> tuple[PlannedTask, ...]:
    """Every task of ``definition`` as a run of it (a rerun's, with ``rerun``) creates
    it, when the run starts at once."""
    planned = []
    for task in definition.tasks:
        if task.map_over is not None:
            # Its elements are created when its upstream succeeds (the expansion); a
            # rerun that carries the upstream over creates them with the run.
            planned += _rerun_elements(definition, task.key, rerun)
            continue
        carried = None if rerun is None else rerun.carried.get(task.key)
        if carried is not None:
            state = TaskRunState.PENDING  # the carry_over edge follows, from pending
        elif rerun is not None:
            state = rerun.initial_state(task)
        else:
            state = initial_task_run_state(len(task.depends_on))
        planned.append(
            PlannedTask(
                key=task.key,
                type=task.type,
                depends_on=task.depends_on,
                max_attempts=definition.retry_policy_for(task.key).max_attempts,
                lease_seconds=definition.lease_seconds_for(task.key),
                timeout_seconds=definition.timeout_seconds_for(task.key),
                max_running=task.max_running,
                max_worker_losses=definition.max_worker_losses_for(task.key),
                state=state,
                carried=carried,
            )
        )
    return tuple(planned)


def expansion_events(
    definition: WorkflowDefinition,
    run_id: UUID,
    upstream: str,
    result: list[Any],
    *,
    at: datetime,
    actor: str,
) -> list[task_run.TaskRun.Created]:
    """The creation of every element of each task mapped over ``upstream``, whose
    result (``mapping.result_problem`` checked it) is ``result``: one ready task run per
    element, by mapped task then index, each carrying its index and input element."""
    events = []
    # What the library's _create records (its get_topic of an unregistered class).
    topic = f"{task_run.TaskRun.__module__}:{task_run.TaskRun.__qualname__}"
    created: Any = task_run.TaskRun.Created  # its fields are declared at import (base)
    for mapped in definition.mapped_over(upstream):
        task = definition.task(mapped)
        keys = mapping.element_keys(mapped, result, task.map_key)
        fixed = {
            "workflow_run_id": run_id,
            "task_type": task.type,
            "depends_on": [upstream],
            "max_attempts": definition.retry_policy_for(mapped).max_attempts,
            "lease_seconds": definition.lease_seconds_for(mapped),
            "timeout_seconds": definition.timeout_seconds_for(mapped),
            "max_running": task.max_running,
            "max_worker_losses": definition.max_worker_losses_for(mapped),
            "state": TaskRunState.READY.value,
            "actor": actor,
        }
        # Built directly, not through a new aggregate each: the same event, 5x faster
        # (10,000 elements; tests/unit/aggregates/test_mapping.py holds them equal).
        events += [
            created(
                originator_topic=topic,
                originator_id=new_id(),
                originator_version=1,
                timestamp=at,
                task_key=keys[index],
                map_index=index,
                map_item=item,
                **fixed,
            )
            for index, item in enumerate(result)
        ]
    return events


def _rerun_elements(
    definition: WorkflowDefinition, key: str, rerun: RerunPlan | None
) -> list[PlannedTask]:
    """The elements of the mapped task ``key`` a rerun creates with its run: one per
    element of the carried-over upstream's list, each carried over too or ready."""
    over = definition.task(key).map_over
    if rerun is None or over is None:
        return []
    upstream = rerun.carried.get(over)
    if upstream is None or not isinstance(upstream.result, list):
        return []
    elements = []
    keys = mapping.element_keys(key, upstream.result, definition.task(key).map_key)
    for index, item in enumerate(upstream.result):
        carried = rerun.carried.get(keys[index])
        elements.append(
            PlannedTask(
                key=keys[index],
                type=definition.task(key).type,
                depends_on=(over,),
                max_attempts=definition.retry_policy_for(key).max_attempts,
                lease_seconds=definition.lease_seconds_for(key),
                timeout_seconds=definition.timeout_seconds_for(key),
                max_running=definition.task(key).max_running,
                max_worker_losses=definition.max_worker_losses_for(key),
                state=TaskRunState.PENDING if carried is not None else TaskRunState.READY,
                carried=carried,
                map_index=index,
                map_item=item,
            )
        )
    return elements


def limited_task_types(definition: WorkflowDefinition) -> tuple[str, ...]:
    """The task types ``definition`` limits (``max_running``), each once, sorted."""
    return tuple(sorted({t.type for t in definition.tasks if t.max_running}))


def submitted_run(
    definition: WorkflowDefinition,
    inputs: dict[str, Any],
    *,
    idempotency_key: str | None,
    actor: str,
    start_at: start_time.StartAt = None,
    trace_context: dict[str, str] | None = None,
) -> RunPlan:
    """The plan of a submitted run (a cron schedule's fire included)."""
    (plan,) = submitted_runs(
        definition, [inputs], idempotency_key=idempotency_key, actor=actor, start_at=start_at
    )
    return plan.traced(trace_context)


def submitted_runs(
    definition: WorkflowDefinition,
    inputs: Sequence[dict[str, Any]],
    *,
    actor: str,
    idempotency_key: str | None = None,
    start_at: start_time.StartAt = None,
) -> list[RunPlan]:
    """The plans of runs of ``definition``, one per entry of ``inputs``: their tasks are
    planned once, for all of them (the plans share it)."""
    tasks, limited = planned_tasks(definition), limited_task_types(definition)
    return [
        RunPlan(definition, each, idempotency_key, actor, tasks, limited, start_at)
        for each in inputs
    ]


def rerun_run(
    definition: WorkflowDefinition,
    inputs: dict[str, Any],
    rerun: RerunPlan,
    *,
    idempotency_key: str | None,
    actor: str,
) -> RunPlan:
    """The plan of a rerun (``flowforge.aggregates.rerun.plan`` says which tasks carry
    their result over): it starts at once."""
    tasks, limited = planned_tasks(definition, rerun), limited_task_types(definition)
    return RunPlan(
        definition, inputs, idempotency_key, actor, tasks, limited, rerun_of=rerun.rerun_of
    )
