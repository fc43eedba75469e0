"""Scheduler, publisher and workers together in one process, as threads.

This is the embedded mode (``flowforge run``, ``flowforge demo``): the same Scheduler,
Publisher and Worker classes as production, wired to an in-process dispatch channel
(or to RabbitMQ when one is configured), until a run is terminal or a stop is asked.
"""

from __future__ import annotations

import logging
import threading
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
    """A scheduler, a publisher and ``workers`` workers, each in a thread."""

    app: FlowForge
    transport: Transport
    workers: int = 2
    registry: TaskRegistry = default_registry
    scheduler_interval: float = 0.1
    publisher_interval: float = 0.05
    stop: Stop = field(default_factory=Stop)
    errors: list[BaseException] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        if not self.transport.durable:
            # An in-process channel starts empty: whatever a previous process held in
            # memory is gone, so every ready task without a pending dispatch gets one.
            self.app.redispatch_stalled(0)
        scheduler = Scheduler(self.app, interval=self.scheduler_interval, stop=self.stop)
        publisher = Publisher(
            self.app,
            self.transport.connect_publisher,
            interval=self.publisher_interval,
            stop=self.stop,
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
        """Block until the run is terminal, a thread fails, or ``timeout`` passes."""
        waited = 0.0
        while True:
            run = self.app.get_workflow_run(run_id)
            if on_progress is not None:
                on_progress(run)
            if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state) or self.stop.is_set():
                return run
            if timeout is not None and waited >= timeout:
                return run
            self.stop.wait(poll)
            waited += poll

    def shutdown(self) -> None:
        self.stop.set("shutdown")
        for thread in self._threads:
            thread.join()
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> ProcessGroup:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
