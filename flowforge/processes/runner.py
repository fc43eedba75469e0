"""Scheduler, publisher and workers together in one process, as threads.

This is the embedded mode (``flowforge run``, ``flowforge demo``): the same Scheduler,
Publisher and Worker classes as production, wired to an in-process dispatch channel
(or to RabbitMQ when one is configured), until a run is terminal or a stop is asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.service import FlowForge
from flowforge.processes.loop import Stop
from flowforge.processes.publisher import Publisher
from flowforge.processes.registry import TaskRegistry, default_registry
from flowforge.processes.scheduler import Scheduler
from flowforge.processes.transport import (
    DispatchConsumer,
    DispatchPublisher,
    InMemoryDispatchChannel,
)
from flowforge.processes.worker import Worker
from flowforge.projections.tables import WorkflowRunRow

log = logging.getLogger(__name__)

#: How often a shutdown that waits for its threads checks for a hurry.
JOIN_POLL_S = 0.05


@dataclass
class Transport:
    """How the processes reach the dispatch queue."""

    connect_publisher: Callable[[], DispatchPublisher]
    connect_consumer: Callable[[], DispatchConsumer]
    #: Whether queued dispatches outlive this process (a broker's queue does).
    durable: bool = True

    @classmethod
    def in_memory(cls, channel: InMemoryDispatchChannel | None = None) -> Transport:
        shared = channel or InMemoryDispatchChannel()
        return cls(shared.publisher, shared.consumer, durable=False)


@dataclass
class ProcessGroup:
    """A scheduler, a publisher and ``workers`` workers, each in a thread.

    The group runs only what its registry can run: its scheduler advances only the runs
    whose every task type has a handler in ``registry``, and its publisher sends only
    dispatches of those types. Other runs in the same database are left as they are
    (not started, claimed or failed) for a runner or workers that have their handlers.
    """

    app: FlowForge
    transport: Transport
    workers: int = 2
    registry: TaskRegistry = default_registry
    scheduler_interval: float = 0.1
    publisher_interval: float = 0.05
    stop: Stop = field(default_factory=Stop)
    errors: list[BaseException] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    #: Whether each run seen so far is covered (a run's task types never change).
    _covered: dict[UUID, bool] = field(default_factory=dict)

    def covers(self, run_id: UUID) -> bool:
        """Whether every task type of the run has a handler in this group's registry."""
        covered = self._covered.get(run_id)
        if covered is None:
            definition = self.app.get_workflow_run(run_id).definition
            covered = all(task["type"] in self.registry for task in definition["tasks"])
            self._covered[run_id] = covered
        return covered

    def start(self) -> None:
        if not self.transport.durable:
            # An in-process channel starts empty: whatever a previous process held in
            # memory is gone, so every ready task without a pending dispatch gets one.
            self.app.redispatch_stalled(0)
        scheduler = Scheduler(
            self.app, interval=self.scheduler_interval, stop=self.stop, covers=self.covers
        )
        publisher = Publisher(
            self.app,
            self.transport.connect_publisher,
            interval=self.publisher_interval,
            stop=self.stop,
            task_types=list(self.registry),
        )
        self._spawn("scheduler", scheduler.run)
        self._spawn("publisher", publisher.run)
        for number in range(1, self.workers + 1):
            worker = Worker(
                self.app,
                self.transport.connect_consumer,
                registry=self.registry,
                worker_id=f"worker-{number}",
                stop=self.stop,
            )
            self._spawn(f"worker-{number}", worker.run)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def watched() -> None:
            try:
                target()
            except BaseException as exc:
                # A failure in one thread stops them all: no half-running process.
                log.exception("process thread failed", extra={"process": name})
                self.errors.append(exc)
                self.stop.set(f"{name} failed")

        thread = threading.Thread(target=watched, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait_for(
        self,
        run_id: UUID,
        *,
        timeout: float | None = None,
        on_progress: Callable[[WorkflowRunRow], None] | None = None,
        poll: float = 0.1,
    ) -> WorkflowRunRow:
        """Block until the run is terminal, a stop is requested, or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.app.get_workflow_run(run_id)
            if on_progress is not None:
                on_progress(run)
            if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state) or self.stop.is_set():
                return run
            if deadline is not None and time.monotonic() >= deadline:
                return run
            self.stop.wait(poll if deadline is None else min(poll, deadline - time.monotonic()))

    def shutdown(
        self, grace: float | None = None, hurry: threading.Event | None = None
    ) -> list[str]:
        """Stop every thread; the names of those abandoned still running.

        A worker finishes the task in hand before it stops. With a ``grace``, the wait
        for that ends after ``grace`` seconds, or as soon as ``hurry`` is set: the
        threads still running are abandoned (they are daemons, so they end with the
        process). An abandoned task keeps its lease until it expires; then the reaper of
        any later scheduler moves it back to ready and it runs again.
        """
        self.stop.set("shutdown")
        deadline = None if grace is None else time.monotonic() + grace
        for thread in self._threads:
            while thread.is_alive() and not (hurry is not None and hurry.is_set()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                thread.join(JOIN_POLL_S if left is None else min(JOIN_POLL_S, left))
        if self.errors:
            raise self.errors[0]
        return [thread.name for thread in self._threads if thread.is_alive()]

    def __enter__(self) -> ProcessGroup:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
