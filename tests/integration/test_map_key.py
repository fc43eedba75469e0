"""A mapped task's elements keyed by a field of each element (``map_key``, issue 46), on
both backends: the keys, the reduce step in list order, the grouped counts, a rerun,
and a list that cannot be keyed failing its upstream with nothing created."""

from __future__ import annotations

from typing import Any

import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskRegistry
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import states
from tests.integration.test_mapped_tasks import mapped_workflow, run_to_end, succeed_list_files

FILES = [{"id": "b.csv", "rows": 2}, {"id": 7, "rows": 3}, {"id": "a.csv", "rows": 1}]


def keyed_workflow() -> dict[str, Any]:
    """list_files -> process (mapped, keyed by each file's id) -> reduce."""
    definition = mapped_workflow()
    definition["tasks"][1]["map_key"] = "id"
    return definition


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel) -> Worker:
    """list_files returns FILES, process ten times its file's rows, reduce the list."""
    registry = TaskRegistry()
    registry.task("list_files")(lambda ctx: FILES)
    registry.task("process")(lambda ctx: ctx.item["rows"] * 10)
    registry.task("reduce")(lambda ctx: {"got": ctx.upstream["process"]})
    return Worker(app, channel.consumer, registry=registry, worker_id="w-keyed")


def test_keyed_elements_are_named_by_their_key_and_reduced_in_list_order(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker
) -> None:
    run_id = app.start_workflow_run(keyed_workflow())

    assert run_to_end(app, channel, worker, run_id) == "succeeded"

    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    elements = ["process[b.csv]", "process[7]", "process[a.csv]"]  # in the list's order
    assert sorted(tasks) == sorted(["list_files", *elements, "reduce"])
    assert [tasks[key].map_index for key in elements] == [0, 1, 2]
    assert [tasks[key].map_item for key in elements] == FILES
    assert tasks["reduce"].result == {"got": [20, 30, 10]}
    (view,) = app.mapped_tasks(app.get_workflow_run(run_id))
    assert (view.elements, view.counts, view.state) == (3, {"succeeded": 3}, "succeeded")


def test_a_rerun_carries_the_keyed_elements_over_and_runs_a_named_one_again(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker
) -> None:
    old = app.start_workflow_run(keyed_workflow())
    assert run_to_end(app, channel, worker, old) == "succeeded"

    new = app.rerun_workflow_run(old, from_tasks=["process[a.csv]"]).run_id

    carried = {t.task_key for t in app.task_runs(new) if t.carried_from_run_id == old}
    assert carried == {"list_files", "process[b.csv]", "process[7]"}
    assert run_to_end(app, channel, worker, new) == "succeeded"


@pytest.mark.parametrize(
    ("listed", "why"),
    [
        ([{"id": "x"}, {"name": "y"}], "element 1 of the list 'process' maps over has no 'id'"),
        ([{"id": "x"}, {"id": "x"}], "'x', as element 0 has"),
        ([{"id": False}], "a string or an integer"),
        (["a.csv"], "has no 'id'"),
    ],
)
def test_a_list_that_cannot_be_keyed_fails_the_upstream_and_creates_nothing(
    app: FlowForge, listed: list[Any], why: str
) -> None:
    run_id = app.start_workflow_run(keyed_workflow())

    assert succeed_list_files(app, run_id, listed)  # the finish is recorded, as a failure

    assert states(app, run_id) == {"list_files": "failed", "reduce": "pending"}
    (upstream,) = [t for t in app.task_runs(run_id) if t.task_key == "list_files"]
    assert upstream.error is not None
    assert upstream.error["type"] == "MapOverError"
    assert why in upstream.error["message"]
    assert app.mapped_task_counts(run_id) == {}
