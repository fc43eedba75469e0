"""Routing: a dispatch reaches only a worker that has a handler for its task type.

Real processes' loops in threads (scheduler, publisher, workers with different handler
sets) on one deployment: RabbitMQ with PostgreSQL, and the in-process channel with
SQLite. A task of a type no running worker has waits in its queue, using no attempt,
and ``why`` says so from the broker's consumer count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pytest

from flowforge.app import why as explain_task
from flowforge.app.service import FlowForge
from flowforge.bootstrap import Processes, Transport
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq
from flowforge.processes.loop import Stop
from flowforge.processes.registry import TaskRegistry
from flowforge.processes.supervisor import Supervisor
from flowforge.processes.transport import InMemoryDispatchChannel
from tests import topology
from tests.helpers import wait_until

#: How long a test waits for its runs; polling stops as soon as they end.
DEADLINE_S = 60.0


def workflow(name: str, task_type: str, count: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [{"key": f"{name}{i}", "type": task_type} for i in range(count)],
    }


def registry(*task_types: str) -> TaskRegistry:
    handlers = TaskRegistry()
    for task_type in task_types:
        handlers.task(task_type)(lambda ctx: {"ran": ctx.task_type})
    return handlers


@dataclass
class Deployment:
    """One database and one transport; processes started on it, stopped at the end."""

    app: FlowForge
    transport: Transport
    broker: BrokerConfig | None = None
    stop: Stop = field(default_factory=Stop)
    supervisor: Supervisor | None = None

    def processes(self, handlers: TaskRegistry) -> Processes:
        return Processes(self.app, self.transport, handlers, self.stop)

    def start(self, name: str, target: Callable[[], None]) -> None:
        if self.supervisor is None:
            self.supervisor = Supervisor(self.stop)
        self.supervisor.spawn(name, target)

    def start_dispatching(self) -> None:
        """A scheduler and a publisher: they run no task."""
        nothing = self.processes(TaskRegistry())
        self.start("scheduler", nothing.scheduler(interval=0.2).run)
        self.start("publisher", nothing.publisher(interval=0.05).run)

    def start_worker(self, worker_id: str, *task_types: str) -> None:
        self.start(worker_id, self.processes(registry(*task_types)).worker(worker_id).run)

    def wait_for(self, run_id: UUID) -> str:
        def ended() -> str | None:
            state = self.app.get_workflow_run(run_id).state
            return state if state in ("succeeded", "failed", "cancelled") else None

        return wait_until(ended, DEADLINE_S, f"run {run_id} did not end")

    def close(self) -> None:
        self.stop.set("test over")
        if self.supervisor is not None:
            assert self.supervisor.join(grace=30) == [], "a process did not stop"
            assert self.supervisor.errors == []


@pytest.fixture(params=["rabbitmq-postgres", "memory-sqlite"])
def deployment(
    request: pytest.FixtureRequest, pg_app: FlowForge, sqlite_app: FlowForge
) -> Iterator[Deployment]:
    if request.param == "memory-sqlite":
        running = Deployment(sqlite_app, Transport.in_memory(InMemoryDispatchChannel()))
        yield running
        running.close()
        return
    with topology.own_topology("ff-routing") as broker:
        running = Deployment(pg_app, Transport.rabbitmq(broker), broker)
        try:
            yield running
        finally:
            running.close()


def claims(app: FlowForge, run_id: UUID) -> list[tuple[str, str, int | None]]:
    """(task type, claiming worker, attempt) of every claim in the run's audit log."""
    types = {task.id: task.task_type for task in app.task_runs(run_id)}
    return sorted(
        (types[entry.aggregate_id], entry.actor, entry.attempt)
        for entry in app.run_history(run_id)
        if entry.transition == "claim"
    )


def test_two_workers_with_different_handlers_each_run_only_their_own_types(
    deployment: Deployment,
) -> None:
    app = deployment.app
    alphas = app.start_workflow_run(workflow("a", "alpha"))
    betas = app.start_workflow_run(workflow("b", "beta"))
    deployment.start_dispatching()
    deployment.start_worker("w-alpha", "alpha")
    deployment.start_worker("w-beta", "beta")

    assert deployment.wait_for(alphas) == "succeeded"
    assert deployment.wait_for(betas) == "succeeded"
    # One claim per task, by the worker of its type, at attempt 1: no attempt burnt.
    assert claims(app, alphas) == [("alpha", "w-alpha", 1)] * 4
    assert claims(app, betas) == [("beta", "w-beta", 1)] * 4


def test_a_type_no_worker_runs_waits_using_no_attempt_until_its_worker_starts(
    deployment: Deployment,
) -> None:
    app = deployment.app
    waiting = app.start_workflow_run(workflow("s", "sleep", count=1))
    other = app.start_workflow_run(workflow("a", "alpha", count=2))
    deployment.start_dispatching()
    deployment.start_worker("w-alpha", "alpha")
    assert deployment.wait_for(other) == "succeeded"
    (task,) = app.task_runs(waiting)

    def published() -> bool:
        dispatches = app.dispatches_of(task.id)
        return bool(dispatches) and all(d.published_at is not None for d in dispatches)

    wait_until(published, DEADLINE_S, "the waiting task's dispatch was not published")
    # Published, and nobody took it: still ready, never claimed.
    assert app.get_task_run(task.id).state == "ready"
    assert claims(app, waiting) == []
    if deployment.broker is not None:
        broker = deployment.broker
        answer = explain_task.why(
            app, task.id, queues=lambda task_type: rabbitmq.queue_state(broker, task_type)
        )
        assert answer.reason == "no_consumer"
        assert f"no worker is consuming queue {broker.queue_for('sleep')} for type sleep" in (
            answer.headline
        )

    deployment.start_worker("w-sleep", "sleep")
    assert deployment.wait_for(waiting) == "succeeded"
    assert claims(app, waiting) == [("sleep", "w-sleep", 1)]
