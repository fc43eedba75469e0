"""Dynamic fan-out (``map_over``, issue 46) on both backends: the expansion in the
upstream's finish, the reduce step, the empty list, a wrong result, the bound, the
failure policy per element, retries per element, races with schedulers and workers,
and the rebuild."""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests import helpers
from tests.helpers import RACE_TIMEOUT_S, handle_next, race, states, task_id
from tests.integration.test_rebuild import assert_log_agrees_with_rows, differences
from tests.integration.test_rerun import raw_rows

MAX_STEPS = 400
LEASE_S = 60.0


def mapped_workflow(**extra: Any) -> dict[str, Any]:
    """list_files -> process (mapped over its list) -> reduce."""
    return {
        "name": "mapped",
        "retry": {"max_attempts": 1},
        "tasks": [
            {"key": "list_files", "type": "list_files"},
            {"key": "process", "type": "process", "map_over": "list_files"},
            {"key": "reduce", "type": "reduce", "depends_on": ["process"]},
        ],
        **extra,
    }


class Handlers:
    """The handlers, and what each saw."""

    def __init__(self) -> None:
        self.listed: Any = [1, 2, 3]
        self.failing: set[int] = set()
        self.seen: list[TaskContext] = []
        self.lock = threading.Lock()
        self.registry = TaskRegistry()
        self.registry.task("list_files")(self.list_files)
        self.registry.task("process")(self.process)
        self.registry.task("reduce")(self.reduce)

    def list_files(self, ctx: TaskContext) -> Any:
        return self.listed

    def process(self, ctx: TaskContext) -> Any:
        with self.lock:
            self.seen.append(ctx)
        if ctx.index in self.failing:
            self.failing.discard(ctx.index)
            raise RuntimeError(f"element {ctx.index} broke")
        return {"index": ctx.index, "double": ctx.item * 2}

    def reduce(self, ctx: TaskContext) -> Any:
        with self.lock:
            self.seen.append(ctx)
        return {"got": ctx.upstream["process"]}


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel, handlers: Handlers) -> Worker:
    return Worker(app, channel.consumer, registry=handlers.registry, worker_id="w-map")


def run_to_end(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, run_id: UUID
) -> str:
    """The state the run ends in (``tests.helpers.run_to_end``, with more steps)."""
    return helpers.run_to_end(app, channel, worker, run_id, max_steps=MAX_STEPS).state


def succeed_list_files(app: FlowForge, run_id: UUID, result: Any) -> bool:
    """Claim and succeed list_files with ``result``, as a worker does."""
    claim = app.claim_task_run(task_id(app, run_id, "list_files"), "w", LEASE_S)
    assert claim is not None
    return app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed", result)


def test_a_mapped_task_runs_once_per_element_and_its_dependant_gets_the_results_in_order(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    run_id = app.start_workflow_run(mapped_workflow())
    # No row for the mapped task until its upstream has returned its list.
    assert states(app, run_id) == {"list_files": "ready", "reduce": "pending"}

    assert run_to_end(app, channel, worker, run_id) == "succeeded"

    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    assert sorted(tasks) == ["list_files", "process[0]", "process[1]", "process[2]", "reduce"]
    for index in range(3):
        element = tasks[f"process[{index}]"]
        assert (element.map_index, element.map_item) == (index, index + 1)
        assert element.depends_on == ["list_files"]
        assert element.task_type == "process"
    items = sorted((c.index, c.item) for c in handlers.seen if c.task_type == "process")
    assert items == [(0, 1), (1, 2), (2, 3)]
    expected = [{"index": i, "double": 2 * (i + 1)} for i in range(3)]
    assert tasks["reduce"].result == {"got": expected}
    assert_log_agrees_with_rows(app)


def test_the_elements_are_created_in_the_upstreams_finish_each_with_its_dispatch(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(mapped_workflow())
    assert succeed_list_files(app, run_id, ["a", "b"])
    # Nothing else ran in between: the finish's own transaction created them, ready.
    assert states(app, run_id) == {
        "list_files": "succeeded",
        "process[0]": "ready",
        "process[1]": "ready",
        "reduce": "pending",
    }
    for key in ("process[0]", "process[1]"):
        (dispatch,) = app.dispatches_of(task_id(app, run_id, key))
        assert (dispatch.task_key, dispatch.fencing_token) == (key, 0)
    # The creation event carries the index and the element: the aggregate replays them.
    element = app.task_run_aggregate(task_id(app, run_id, "process[1]"))
    assert (element.version, element.map_index, element.map_item) == (1, 1, "b")


def test_an_empty_list_ends_the_mapped_task_with_no_element_and_its_dependant_gets_nothing(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.listed = []
    run_id = app.start_workflow_run(mapped_workflow())

    assert run_to_end(app, channel, worker, run_id) == "succeeded"

    assert states(app, run_id) == {"list_files": "succeeded", "reduce": "succeeded"}
    reduce = next(t for t in app.task_runs(run_id) if t.task_key == "reduce")
    assert reduce.result == {"got": []}


def test_an_empty_list_of_a_mapped_leaf_ends_the_run(app: FlowForge) -> None:
    definition = mapped_workflow()
    del definition["tasks"][2]
    run_id = app.start_workflow_run(definition)
    assert succeed_list_files(app, run_id, [])
    app.advance_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "succeeded"


@pytest.mark.parametrize("result", [{"files": [1]}, "a, b", 3, None])
def test_a_result_that_is_not_a_list_fails_the_upstream_and_creates_nothing(
    app: FlowForge, result: Any
) -> None:
    run_id = app.start_workflow_run(mapped_workflow())

    assert succeed_list_files(app, run_id, result)

    listed = next(t for t in app.task_runs(run_id) if t.task_key == "list_files")
    assert listed.state == "failed"
    assert listed.result is None
    assert listed.error is not None
    assert listed.error["type"] == "MapOverError"
    assert "not a list" in listed.error["message"]
    assert "'process'" in listed.error["message"]
    assert set(states(app, run_id)) == {"list_files", "reduce"}
    app.advance_workflow_run(run_id)
    assert app.get_workflow_run(run_id).state == "failed"  # one attempt


def test_a_list_longer_than_the_bound_fails_the_upstream_and_one_at_the_bound_expands(
    app: FlowForge,
) -> None:
    too_long = app.start_workflow_run(mapped_workflow(max_map_elements=3))
    assert succeed_list_files(app, too_long, [1, 2, 3, 4])
    listed = next(t for t in app.task_runs(too_long) if t.task_key == "list_files")
    assert listed.state == "failed"
    assert listed.error is not None
    assert "4 elements, more than the workflow's max_map_elements (3)" in listed.error["message"]
    assert set(states(app, too_long)) == {"list_files", "reduce"}

    at_bound = app.start_workflow_run(mapped_workflow(max_map_elements=3))
    assert succeed_list_files(app, at_bound, [1, 2, 3])
    assert len(states(app, at_bound)) == 2 + 3


def test_a_refused_result_is_retried_under_the_upstreams_retry_policy(app: FlowForge) -> None:
    run_id = app.start_workflow_run(mapped_workflow(retry={"max_attempts": 2}))
    assert succeed_list_files(app, run_id, "oops")
    app.advance_workflow_run(run_id)  # schedules the retry
    listed = next(t for t in app.task_runs(run_id) if t.task_key == "list_files")
    assert listed.state in {"retrying", "ready"}
    assert listed.attempt == 2


def test_nested_maps_are_refused_at_definition_time(app: FlowForge) -> None:
    definition = mapped_workflow()
    definition["tasks"].append({"key": "again", "type": "process", "map_over": "process"})
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match="nested maps"):
        app.start_workflow_run(definition)


def test_each_element_is_retried_on_its_own(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.failing = {1}
    definition = mapped_workflow(retry={"max_attempts": 2, "backoff_seconds": 0})
    run_id = app.start_workflow_run(definition)

    assert run_to_end(app, channel, worker, run_id) == "succeeded"

    attempts = {t.task_key: t.attempt for t in app.task_runs(run_id)}
    assert attempts["process[1]"] == 2
    assert attempts["process[0]"] == attempts["process[2]"] == 1


def test_under_fail_fast_a_failed_element_fails_the_run_and_cancels_the_reducer(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.failing = {2}
    run_id = app.start_workflow_run(mapped_workflow())

    assert run_to_end(app, channel, worker, run_id) == "failed"

    found = states(app, run_id)
    assert found["process[2]"] == "failed"
    assert found["reduce"] == "cancelled"


def test_finish_branches_cancels_the_reducer_of_a_failed_element(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.failing = {0}
    definition = mapped_workflow(on_failure="finish_branches")
    other = {"key": "other", "type": "list_files", "depends_on": ["list_files"]}
    definition["tasks"].append(other)
    run_id = app.start_workflow_run(definition)
    assert succeed_list_files(app, run_id, [1, 2, 3])
    app.publish_pending_dispatches(channel.publisher())
    failed = task_id(app, run_id, "process[0]")
    while app.get_task_run(failed).state != "failed":
        handle_next(channel, worker)
    app.advance_workflow_run(run_id)

    # The reducer can never run: cancelled as upstream_failed while the run goes on.
    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    assert tasks["reduce"].state == "cancelled"
    assert tasks["reduce"].error is not None
    assert tasks["reduce"].error["reason"] == "upstream_failed"
    assert app.get_workflow_run(run_id).state == "running"
    assert run_to_end(app, channel, worker, run_id) == "failed"
    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    assert tasks["process[1]"].state == tasks["process[2]"].state == "succeeded"
    assert tasks["other"].state == "succeeded"  # its branch finished


def test_the_expansion_racing_schedulers_and_workers_creates_each_element_once(
    app: FlowForge,
) -> None:
    width = 200
    run_id = app.start_workflow_run(mapped_workflow())
    claim = app.claim_task_run(task_id(app, run_id, "list_files"), "w", LEASE_S)
    assert claim is not None
    claimed: list[UUID] = []
    done = threading.Event()

    def finish() -> bool:
        try:
            return app.finish_task_run(
                claim.task_run_id, claim.fencing_token, "succeed", list(range(width))
            )
        finally:
            done.set()

    def schedule() -> None:
        while not done.is_set():
            app.advance_workflow_run(run_id)
        app.advance_workflow_run(run_id)

    def claim_elements() -> None:
        while True:
            finished = done.is_set()
            for task in app.ready_task_runs(limit=1000):
                got = app.claim_task_run(task.id, "racer", LEASE_S)
                if got is not None:
                    claimed.append(task.id)
            if finished:
                return

    results = race(finish, schedule, schedule, claim_elements)

    assert results[0] is True
    keys = [t.task_key for t in app.task_runs(run_id)]
    elements = sorted(k for k in keys if k.startswith("process["))
    assert len(elements) == len(set(elements)) == width
    assert sorted(elements) == sorted(f"process[{i}]" for i in range(width))
    for task in app.task_runs(run_id):
        if task.map_index is not None:
            assert len(app.dispatches_of(task.id)) == 1  # one dispatch each
    assert len(claimed) == len(set(claimed))
    assert_log_agrees_with_rows(app)
    assert RACE_TIMEOUT_S > 0


def test_the_rebuild_reproduces_the_expanded_rows(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    handlers: Handlers,
    request: pytest.FixtureRequest,
) -> None:
    finished = app.start_workflow_run(mapped_workflow())
    run_to_end(app, channel, worker, finished)
    unfinished = app.start_workflow_run(mapped_workflow())
    assert succeed_list_files(app, unfinished, ["x", {"y": 1}, None])

    before = raw_rows(app, request)
    app.rebuild_projections()
    after = raw_rows(app, request)

    assert differences(before, after) == []
    assert before == after
    items = [r["map_item"] for r in after["task_runs"] if r["map_index"] is not None]
    assert len(items) == 6  # not vacuous
    assert_log_agrees_with_rows(app)


def test_an_elements_handler_gets_its_element_not_the_whole_list(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    run_id = app.start_workflow_run(mapped_workflow())
    assert run_to_end(app, channel, worker, run_id) == "succeeded"
    elements = [c for c in handlers.seen if c.task_type == "process"]
    assert len(elements) == 3
    assert all(dict(c.upstream) == {} for c in elements)
    assert sorted(c.item for c in elements) == [1, 2, 3]


def test_elements_finishing_at_once_promote_the_reducer_exactly_once(app: FlowForge) -> None:
    width = 6
    run_id = app.start_workflow_run(mapped_workflow())
    assert succeed_list_files(app, run_id, list(range(width)))
    claims = []
    for index in range(width):
        claim = app.claim_task_run(task_id(app, run_id, f"process[{index}]"), "w", LEASE_S)
        assert claim is not None
        claims.append(claim)

    def finisher(claim: Any) -> Any:
        return lambda: app.finish_task_run(claim.task_run_id, claim.fencing_token, "succeed", 1)

    assert race(*(finisher(c) for c in claims)) == [True] * width
    for _ in range(3):  # what a finish could not advance, a woken pass does
        app.advance_woken_runs()
        app.advance_workflow_run(run_id)

    reduce_id = task_id(app, run_id, "reduce")
    assert app.get_task_run(reduce_id).state == "ready"
    history = [e.transition for e in app.history(reduce_id)]
    assert history.count("dependencies_satisfied") == 1
    assert len(app.dispatches_of(reduce_id)) == 1
