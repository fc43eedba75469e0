"""A database's deployment identity, on both backends: stored once, stamped on every
dispatch, and checked by the worker, which never silently eats another deployment's
dispatch (it logs an error naming both deployments and dead-letters it)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch
from flowforge.app.dispatch import message_for
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import handle_next, one_task

ONE = one_task()


def work(ctx: TaskContext) -> str:
    return "done"


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel) -> Worker:
    registry = TaskRegistry()
    registry.task("work")(work)
    return Worker(app, channel.consumer, registry=registry, worker_id="w-dep")


@pytest.fixture
def channel() -> InMemoryDispatchChannel:
    return InMemoryDispatchChannel()


def test_a_database_has_one_deployment_id_for_good(app: FlowForge, tmp_path: Path) -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", app.deployment_id)
    url = f"sqlite:///{tmp_path / 'other.db'}"
    with FlowForge(url) as other, FlowForge(url) as reopened:
        assert other.deployment_id == reopened.deployment_id != app.deployment_id


def test_every_dispatch_carries_its_deployment(
    app: FlowForge, channel: InMemoryDispatchChannel
) -> None:
    app.start_workflow_run(ONE)
    assert app.publish_pending_dispatches(channel.publisher()) == 1
    consumer = channel.consumer()
    delivery = consumer.get(1.0)
    assert delivery is not None
    message = decode_dispatch(delivery.body)
    assert (message.schema_version, message.deployment) == (2, app.deployment_id)
    consumer.close()


def test_a_dispatch_of_another_deployment_is_dead_lettered_loudly_and_claims_nothing(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = ready_task(app)
    # This task run's dispatch, as another deployment's publisher would have stamped it.
    (row,) = app.dispatches_of(task.id)
    foreign = message_for(row, "0123456789ab")
    channel.publisher().publish([foreign])
    with caplog.at_level(logging.ERROR):
        assert handle_next(channel, worker) == "dead_lettered"
    assert channel.dead_letters == [foreign.encode()]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "another deployment" in record.getMessage()
    assert (record.__dict__["deployment"], record.__dict__["message_deployment"]) == (
        app.deployment_id,
        "0123456789ab",
    )
    after = app.get_task_run(task.id)
    assert (after.state, after.fencing_token) == ("ready", 0)  # never claimed


def test_a_dispatch_from_before_deployments_is_still_run(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker
) -> None:
    task = ready_task(app)
    (row,) = app.dispatches_of(task.id)
    legacy = DispatchMessage(
        dispatch_id=row.dispatch_id,
        task_run_id=row.task_run_id,
        task_key=row.task_key,
        task_type=row.task_type,
        fencing_token=row.fencing_token,
    )
    assert json.loads(legacy.encode())["schema_version"] == 1
    channel.publisher().publish([legacy])
    assert handle_next(channel, worker) == "succeed"
    assert app.get_task_run(task.id).state == "succeeded"


def ready_task(app: FlowForge) -> TaskRunView:
    (task,) = app.task_runs(app.start_workflow_run(ONE))
    assert task.state == "ready"
    return task
