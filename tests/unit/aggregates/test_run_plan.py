"""A run's plan: what its creation writes, decided in one place (property-tested).

The projection writes the plan's events as they are, so these properties are the
creation's: every task once, roots and only roots ready, a delayed run's tasks all
pending, a rerun carrying exactly the results of the tasks not downstream of what
runs again, and each task's fields as the definition gives them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from flowforge.aggregates import rerun, run_plan, start_time
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import Provenance, TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun

NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
RUN_ID = UUID("00000000-0000-4000-8000-000000000001")
OLD_RUN_ID = UUID("00000000-0000-4000-8000-000000000002")
ACTOR = "planner"

Events = list[tuple[TaskRun.Created, TaskRun.ResultCarriedOver | None]]


@st.composite
def definitions(draw: st.DrawFn) -> WorkflowDefinition:
    """A DAG of up to 7 tasks (each depending on some before it), of a few types, some
    with a limit, a retry policy, a lease or a timeout of their own."""
    tasks: list[dict[str, Any]] = []
    for i in range(draw(st.integers(min_value=1, max_value=7))):
        earlier = [f"t{j}" for j in range(i)]
        task: dict[str, Any] = {
            "key": f"t{i}",
            "type": draw(st.sampled_from(["a", "b", "c"])),
            "depends_on": draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else [],
        }
        if draw(st.booleans()):
            task["max_running"] = draw(st.integers(min_value=1, max_value=3))
        if draw(st.booleans()):
            task["retry"] = {"max_attempts": draw(st.integers(min_value=1, max_value=5))}
        if draw(st.booleans()):
            task["lease_seconds"] = draw(st.sampled_from([5.0, 60.0]))
        if draw(st.booleans()):
            task["timeout_seconds"] = draw(st.sampled_from([1.0, 600.0]))
        tasks.append(task)
    workflow: dict[str, Any] = {"name": "w", "tasks": tasks}
    if draw(st.booleans()):
        workflow["lease_seconds"] = 45.0
    return WorkflowDefinition.model_validate(workflow)


@st.composite
def reruns(draw: st.DrawFn) -> tuple[WorkflowDefinition, rerun.RerunPlan, list[str]]:
    """A definition, a finished run of it that a rerun can rerun, and the rerun's plan
    (``from_tasks`` drawn too): a task can only have succeeded after its dependencies."""
    definition = draw(definitions())
    succeeded: dict[str, rerun.CarriedResult] = {}
    for key in definition.topological_order():
        deps_ok = all(d in succeeded for d in definition.task(key).depends_on)
        if deps_ok and draw(st.booleans()):
            source = Provenance(OLD_RUN_ID, UUID(int=len(succeeded) + 10), 1)
            succeeded[key] = rerun.CarriedResult({"from": key}, source)
    keys = [t.key for t in definition.tasks]
    named = draw(st.lists(st.sampled_from(keys), unique=True))
    carried = rerun.carried_over(definition, succeeded.keys(), named)
    if len(carried) == len(keys):  # nothing to rerun: run the first task again
        named = [keys[0]]
    plan = rerun.plan(OLD_RUN_ID, WorkflowRunState.SUCCEEDED, definition, succeeded, named)
    return definition, plan, named


def created(plan: run_plan.RunPlan, at: datetime = NOW) -> tuple[WorkflowRun.Created, Events]:
    run = plan.run_created(RUN_ID, at)
    return run, list(plan.task_events(run))


def submitted(
    definition: WorkflowDefinition, start_at: start_time.StartAt = None
) -> run_plan.RunPlan:
    return run_plan.submitted_run(
        definition, {"n": 1}, idempotency_key=None, actor=ACTOR, start_at=start_at
    )


@given(definitions())
def test_every_task_is_created_once_in_order_with_the_definitions_fields(
    definition: WorkflowDefinition,
) -> None:
    run, events = created(submitted(definition))
    assert [e.task_key for e, _ in events] == [t.key for t in definition.tasks]
    assert len({e.originator_id for e, _ in events}) == len(events)
    for (event, carried), task in zip(events, definition.tasks, strict=True):
        assert carried is None
        assert event.workflow_run_id == run.originator_id == RUN_ID
        assert event.timestamp == NOW
        assert event.actor == ACTOR
        assert event.task_type == task.type
        assert event.depends_on == list(task.depends_on)
        assert event.max_attempts == definition.retry_policy_for(task.key).max_attempts
        assert event.lease_seconds == definition.lease_seconds_for(task.key)
        assert event.timeout_seconds == definition.timeout_seconds_for(task.key)
        assert event.max_running == task.max_running


@given(definitions())
def test_without_a_delay_roots_and_only_roots_are_created_ready(
    definition: WorkflowDefinition,
) -> None:
    run, events = created(submitted(definition))
    assert run.start_at is None
    for event, _ in events:
        root = not definition.task(event.task_key).depends_on
        assert event.state == (TaskRunState.READY if root else TaskRunState.PENDING).value


@given(definitions(), st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=2)))
def test_a_delayed_run_records_its_start_time_and_creates_every_task_pending(
    definition: WorkflowDefinition, delay: timedelta
) -> None:
    for start_at in (delay, NOW + delay):
        run, events = created(submitted(definition, start_at))
        delayed = delay > timedelta(0)
        assert run.start_at == (NOW + delay if delayed else None)
        undelayed = [e.state for e, _ in created(submitted(definition))[1]]
        expected = [TaskRunState.PENDING.value] * len(events) if delayed else undelayed
        assert [e.state for e, _ in events] == expected


@given(reruns())
def test_a_rerun_carries_exactly_the_results_of_the_succeeded_tasks_not_downstream_of_from(
    case: tuple[WorkflowDefinition, rerun.RerunPlan, list[str]],
) -> None:
    definition, rerun_plan, named = case
    plan = run_plan.rerun_run(definition, {"n": 1}, rerun_plan, idempotency_key=None, actor=ACTOR)
    run, events = created(plan)
    assert run.rerun_of == OLD_RUN_ID
    again = rerun.downstream(definition, named)
    carried = {e.task_key: c for e, c in events if c is not None}
    assert set(carried) == set(rerun_plan.carried) == set(plan.carried)
    assert not set(carried) & again
    for key, event in carried.items():
        source = rerun_plan.carried[key]
        assert event.result == source.result
        assert event.carried_from_run_id == source.source.run_id
        assert event.carried_from_task_run_id == source.source.task_run_id
        assert event.carried_from_attempt == source.source.attempt
        assert event.state == TaskRunState.SUCCEEDED.value


@given(reruns())
def test_a_rerun_creates_carried_tasks_pending_and_the_others_ready_iff_all_deps_carried(
    case: tuple[WorkflowDefinition, rerun.RerunPlan, list[str]],
) -> None:
    definition, rerun_plan, _ = case
    plan = run_plan.rerun_run(definition, {"n": 1}, rerun_plan, idempotency_key=None, actor=ACTOR)
    run, events = created(plan)
    assert run.start_at is None
    for event, carried in events:
        deps = definition.task(event.task_key).depends_on
        if carried is not None:
            assert event.state == TaskRunState.PENDING.value
        elif all(d in rerun_plan.carried for d in deps):
            assert event.state == TaskRunState.READY.value
        else:
            assert event.state == TaskRunState.PENDING.value


@given(definitions())
def test_the_limited_task_types_are_those_with_a_max_running_each_once(
    definition: WorkflowDefinition,
) -> None:
    plan = submitted(definition)
    limited = {t.type for t in definition.tasks if t.max_running is not None}
    assert plan.limited_task_types == tuple(sorted(limited))


@given(definitions(), st.integers(min_value=1, max_value=4))
def test_a_bulk_submission_plans_its_tasks_once_and_each_run_takes_its_own_inputs(
    definition: WorkflowDefinition, count: int
) -> None:
    inputs = [{"i": i} for i in range(count)]
    plans = run_plan.submitted_runs(definition, inputs, actor=ACTOR)
    assert [p.inputs for p in plans] == inputs
    assert all(p.tasks is plans[0].tasks for p in plans)
    assert all(p.run_created(RUN_ID, NOW).inputs == p.inputs for p in plans)


def test_the_trace_context_is_the_runs_and_none_leaves_the_plan_as_it_is() -> None:
    definition = WorkflowDefinition.model_validate(
        {"name": "w", "tasks": [{"key": "a", "type": "t"}]}
    )
    plan = submitted(definition)
    assert plan.traced(None) is plan
    context = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert plan.traced(context).run_created(RUN_ID, NOW).trace_context == context
    assert plan.run_created(RUN_ID, NOW).trace_context is None
