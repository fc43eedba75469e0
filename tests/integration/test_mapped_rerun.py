"""Rerunning a run with a mapped task (issue 46), on both backends: what is carried
over (the list, the succeeded elements), what runs again (a failed element, a named
element or mapped task and what depends on it), and a mapped leaf."""

from __future__ import annotations

import pytest

from flowforge.app.service import FlowForge
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.integration import test_mapped_tasks
from tests.integration.test_mapped_tasks import Handlers, mapped_workflow, run_to_end

#: The fixtures of test_mapped_tasks: its handlers and a worker running them.
handlers = test_mapped_tasks.handlers
worker = test_mapped_tasks.worker


def test_a_rerun_carries_over_the_list_and_the_succeeded_elements_and_reruns_the_failed_one(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.failing = {1}
    old = app.start_workflow_run(mapped_workflow())
    assert run_to_end(app, channel, worker, old) == "failed"
    handlers.seen.clear()

    new = app.rerun_workflow_run(old).run_id

    tasks = {t.task_key: t for t in app.task_runs(new)}
    assert tasks["list_files"].state == "succeeded"
    assert tasks["list_files"].carried_from_run_id == old
    assert tasks["process[0]"].state == tasks["process[2]"].state == "succeeded"
    assert tasks["process[0]"].carried_from_run_id == old
    assert (tasks["process[1]"].state, tasks["process[1]"].map_item) == ("ready", 2)
    assert run_to_end(app, channel, worker, new) == "succeeded"
    assert sorted(c.task_key for c in handlers.seen) == ["process[1]", "reduce"]
    reduce = next(t for t in app.task_runs(new) if t.task_key == "reduce")
    assert reduce.result == {"got": [{"index": i, "double": 2 * (i + 1)} for i in range(3)]}


@pytest.mark.parametrize(
    ("rerun_from", "runs_again", "carried_over"),
    [
        pytest.param(
            "process[2]",
            ["process[2]", "reduce"],
            {"list_files", "process[0]", "process[1]"},
            id="from-one-element",
        ),
        pytest.param(
            "process",
            ["process[0]", "process[1]", "process[2]", "reduce"],
            {"list_files"},
            id="from-the-mapped-task",
        ),
    ],
)
def test_a_rerun_from_a_mapped_task_or_an_element_runs_it_and_its_dependants_again(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    handlers: Handlers,
    rerun_from: str,
    runs_again: list[str],
    carried_over: set[str],
) -> None:
    old = app.start_workflow_run(mapped_workflow())
    assert run_to_end(app, channel, worker, old) == "succeeded"
    handlers.seen.clear()

    new = app.rerun_workflow_run(old, from_tasks=[rerun_from]).run_id

    assert run_to_end(app, channel, worker, new) == "succeeded"
    assert sorted(c.task_key for c in handlers.seen) == runs_again
    carried = {t.task_key for t in app.task_runs(new) if t.carried_from_run_id == old}
    assert carried == carried_over


def test_a_rerun_of_a_mapped_leaf_with_a_failed_element_runs_that_element_again(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, handlers: Handlers
) -> None:
    handlers.failing = {1}
    leaf = mapped_workflow()
    leaf["tasks"] = leaf["tasks"][:2]  # list_files -> process: nothing depends on process
    old = app.start_workflow_run(leaf)
    assert run_to_end(app, channel, worker, old) == "failed"
    handlers.seen.clear()

    new = app.rerun_workflow_run(old).run_id

    carried = {t.task_key for t in app.task_runs(new) if t.carried_from_run_id == old}
    assert carried == {"list_files", "process[0]", "process[2]"}
    assert run_to_end(app, channel, worker, new) == "succeeded"
    assert [c.task_key for c in handlers.seen] == ["process[1]"]
