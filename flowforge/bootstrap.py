"""The composition root: the one place that constructs and wires FlowForge's parts.

Everything concrete is chosen here, and only here: the database (``FlowForge(url)``,
:func:`open_app`), the transport (RabbitMQ when a broker is configured, else the
in-process channel), the handler registry, the one thread supervisor, and the observers
a process reports through (traces, metrics). The long-running loops
(``flowforge.processes``) receive what they need and construct none of it, the
cosmicpython way: a test wires them to an in-memory channel with the same calls. The
command line (``flowforge/cli``) parses and prints, and asks this module for the rest:
``open_app``, ``bootstrap(...).worker(...)``, ``embedded(...)``; the web UI receives the
application it opened (``tests/unit/test_bootstrap.py`` keeps it so).

    settings ──► open_app: FlowForge(url) ─┐
             └─► transport_for ────────────┼──► Processes ──► scheduler() / publisher()
    registry ──────────────────────────────┘        │          / worker()
                                                    └──► Supervisor (threads, watched)
                                           ProcessGroup (embedded) ──┘
    start_tracing, serve_metrics: the observers, started once per process
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from uuid import UUID

from flowforge import config, errors, observers
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.ports import QueueProbe, QueueState
from flowforge.app.results import WorkflowRunView
from flowforge.app.scope import Scope
from flowforge.app.service import REDISPATCH_AFTER_S, FlowForge
from flowforge.config import BrokerConfig, RetentionConfig, Settings
from flowforge.processes import outbox_publisher
from flowforge.processes import scheduler as scheduler_loop
from flowforge.processes.loop import Stop
from flowforge.processes.outbox_publisher import Publisher
from flowforge.processes.registry import TaskRegistry, default_registry
from flowforge.processes.scheduler import Scheduler
from flowforge.processes.supervisor import Supervisor
from flowforge.processes.transport import (
    ConsumerFactory,
    DispatchPublisher,
    InMemoryDispatchChannel,
)
from flowforge.processes.worker import Worker

log = logging.getLogger(__name__)


# --- the transport -----------------------------------------------------------------------


@dataclass
class Transport:
    """How the processes reach the dispatch queue."""

    connect_publisher: Callable[[], DispatchPublisher]
    #: A new consumer of some task types' dispatches; ``prefetch=N`` lets it hold N
    #: deliveries of each type at once (a worker's batch).
    connect_consumer: ConsumerFactory
    #: Whether queued dispatches outlive this process (a broker's queue does).
    durable: bool = True
    #: Asks the broker how many messages a type's queue holds: the scheduler's
    #: redispatch net (``Outbox.redispatch_lost``). None in process: its channel loses
    #: dispatches only with the process, and the runner's start re-sends those.
    probe: QueueProbe | None = None

    @classmethod
    def in_memory(cls, channel: InMemoryDispatchChannel | None = None) -> Transport:
        shared = channel or InMemoryDispatchChannel()
        return cls(shared.publisher, shared.consumer, durable=False)

    @classmethod
    def rabbitmq(cls, broker: BrokerConfig, *, check: bool = True) -> Transport:
        """RabbitMQ; with ``check``, fail now (one line naming host and port) if the
        broker is unreachable, rather than in the first loop's backoff."""
        # Imported here: pika (some 60 ms) only for a process that talks to a broker.
        from flowforge.processes import rabbitmq  # noqa: PLC0415

        if check:
            rabbitmq.check_reachable(broker)
        return cls(
            lambda: rabbitmq.RabbitDispatchPublisher(broker),
            partial(rabbitmq.RabbitDispatchConsumer, broker),
            probe=queue_probe(broker),
        )


#: After the broker failed to answer, the net's probe answers None this long without
#: asking: a broker that times out must not slow every scheduler pass by its timeout.
PROBE_COOLDOWN_S = 30.0


def queue_probe(
    broker: BrokerConfig, *, clock: Callable[[], float] = time.monotonic
) -> QueueProbe:
    """Asks ``broker`` about a type's queue (a passive declare, on a connection of its
    own); None when the broker does not answer (and for ``PROBE_COOLDOWN_S`` after), so
    that the net waits for a pass that can ask rather than redispatching blind."""
    # Imported here: pika only for a process that talks to a broker.
    from flowforge.processes import rabbitmq  # noqa: PLC0415

    quiet_until = [0.0]

    def probe(task_type: str) -> QueueState | None:
        if clock() < quiet_until[0]:
            return None
        try:
            return rabbitmq.queue_state(broker, task_type)
        except errors.BrokerError:
            quiet_until[0] = clock() + PROBE_COOLDOWN_S
            return None

    return probe


def transport_for(settings: Settings, deployment: str, *, in_process: bool = False) -> Transport:
    """In-process dispatch when embedded (or asked: ``flowforge demo``, whatever the
    settings); RabbitMQ when a broker is configured, on the deployment's own topology
    unless its names are set explicitly. An unreachable broker fails here, in one line."""
    if settings.broker is None or in_process:
        return Transport.in_memory()
    return Transport.rabbitmq(settings.broker.for_deployment(deployment))


def open_app(settings: Settings, *, migrate: bool | None = None) -> FlowForge:
    """The application service on the configured database: every command's, process's
    and the web UI's. ``migrate`` is ``FlowForge``'s (``None``: SQLite sets itself up).
    ``migrate=True`` on the embedded default creates its directory, ``./.flowforge/``,
    first: nobody should have to."""
    if migrate and settings.database_url == config.DEFAULT_DATABASE_URL:
        config.DEFAULT_DATABASE_FILE.parent.mkdir(parents=True, exist_ok=True)
    return FlowForge(
        settings.database_url,
        migrate=migrate,
        listen_database_url=settings.listen_database_url,
        prepared_statements=settings.prepared_statements,
    )


# --- the observers -----------------------------------------------------------------------


def start_tracing(service_name: str) -> None:
    """Export this process's spans if the environment asks for it (docs/observability.md,
    "Traces"); a ``ConfigurationError`` if it asks and OpenTelemetry is not installed."""
    observers.install(traces_for=service_name)


def serve_metrics(app: FlowForge, port: int, *, backlog: bool = False) -> None:
    """Serve this process's metrics on ``port`` (docs/observability.md), and with
    ``backlog`` the database's (tasks by state, the outbox): one process's job, the
    scheduler's, so that a scrape of every worker does not query the database. An
    ``OSError`` if the port cannot be listened on."""
    observers.install(metrics_port=port, backlog=app.backlog if backlog else None)


# --- the processes -----------------------------------------------------------------------


@dataclass
class Processes:
    """What every loop receives, wired once; each method builds one loop."""

    app: FlowForge
    #: ``None`` for a process that never touches the queue (the scheduler).
    transport: Transport | None
    registry: TaskRegistry = default_registry
    stop: Stop = field(default_factory=Stop)
    #: The scheduler's way to ask the broker about a queue (the transport's, or the
    #: configured broker's for a scheduler wired without a transport); None: no net.
    probe: QueueProbe | None = None
    #: What the scheduler archives on its own (``FLOWFORGE_ARCHIVE_AFTER``); None: nothing.
    retention: RetentionConfig | None = None

    def scheduler(
        self,
        *,
        interval: float = scheduler_loop.DEFAULT_INTERVAL_S,
        redispatch_after: float = REDISPATCH_AFTER_S,
        scope: Scope | None = None,
    ) -> Scheduler:
        probe = self.probe or (self.transport.probe if self.transport is not None else None)
        return Scheduler(
            self.app,
            interval=interval,
            redispatch_after=redispatch_after,
            probe=probe,
            stop=self.stop,
            scope=scope,
            retention=self.retention,
        )

    def publisher(
        self,
        *,
        batch_size: int = outbox_publisher.DEFAULT_BATCH_SIZE,
        interval: float = outbox_publisher.DEFAULT_INTERVAL_S,
        scope: Scope | None = None,
    ) -> Publisher:
        return Publisher(
            self.app,
            self._transport().connect_publisher,
            batch_size=batch_size,
            interval=interval,
            stop=self.stop,
            scope=scope,
        )

    def worker(
        self,
        worker_id: str | None = None,
        *,
        batch: int = 1,
        task_types: Collection[str] | None = None,
    ) -> Worker:
        """A worker of ``task_types`` (default: every type its registry has a handler
        for, read when it connects); ``batch`` > 1 lets it take that many dispatches at
        once (one claim, one write of their outcomes: ``Worker.handle_batch``)."""
        consumed = self._consumed(task_types)
        connect = self._transport().connect_consumer
        return Worker(
            self.app,
            lambda: connect(prefetch=batch, task_types=consumed or list(self.registry)),
            registry=self.registry,
            worker_id=worker_id,
            stop=self.stop,
            batch=batch,
            task_types=consumed,
        )

    def _consumed(self, task_types: Collection[str] | None) -> list[str] | None:
        """``task_types`` checked against the registry: a worker consumes only types it
        can run, so a type without a handler here is refused at once."""
        if task_types is None:
            return None
        missing = sorted(set(task_types) - set(self.registry))
        if missing:
            raise errors.ConfigurationError(
                f"no handler is registered for task type(s) {', '.join(missing)} "
                f"(registered: {', '.join(self.registry) or 'none'}); a worker consumes "
                f"only types it can run: import their module with --tasks"
            )
        return sorted(set(task_types))

    def _transport(self) -> Transport:
        if self.transport is None:
            raise RuntimeError("These processes were wired without a transport (dispatch=False).")
        return self.transport

    def supervisor(self) -> Supervisor:
        return Supervisor(self.stop)

    def run_workers(
        self,
        worker_ids: Sequence[str],
        *,
        batch: int = 1,
        task_types: Collection[str] | None = None,
        grace: float | None = None,
    ) -> list[str]:
        """Workers in threads of this process until a stop; re-raise a thread's failure.
        After the stop each finishes the task in hand, for ``grace`` seconds at most if
        given; the ids of the workers abandoned with a task still running (unacked: the
        broker redelivers it when this process exits, and the fencing token makes a late
        outcome of theirs harmless)."""
        workers = [
            self.worker(worker_id, batch=batch, task_types=task_types) for worker_id in worker_ids
        ]
        targets = [(worker.worker_id, worker.run) for worker in workers]

        def stopping() -> None:
            """Say what the stop waits for, and how not to wait (a second Ctrl-C)."""
            busy = sum(worker.steps.handling for worker in workers)
            if busy and not self.stop.hurry.is_set():
                wait = f"up to {grace:g}s" if grace is not None else "as long as they take"
                handlers = "handler" if busy == 1 else "handlers"
                log.warning(
                    f"stopping: waiting {wait} for {busy} {handlers} to finish; "
                    f"Ctrl-C again to stop now",
                    extra={"reason": self.stop.reason, "running_handlers": busy},
                )

        return self.supervisor().run(targets, grace=grace, stopping=stopping)


def bootstrap(
    settings: Settings,
    *,
    app: FlowForge | None = None,
    transport: Transport | None = None,
    registry: TaskRegistry = default_registry,
    stop: Stop | None = None,
    dispatch: bool = True,
) -> Processes:
    """Wire the processes for ``settings``; pass ``app`` or ``transport`` to override.

    ``dispatch=False`` wires no transport: nothing is connected or checked (the
    scheduler's: it only asks the configured broker, if any, how full a queue is).
    """
    app = app if app is not None else open_app(settings)
    if transport is None and dispatch:
        transport = transport_for(settings, app.deployment_id)
    probe = None
    if transport is None and settings.broker is not None:
        probe = queue_probe(settings.broker.for_deployment(app.deployment_id))
    return Processes(
        app=app,
        transport=transport,
        registry=registry,
        stop=stop or Stop(),
        probe=probe,
        retention=settings.retention,
    )


# --- the embedded mode -------------------------------------------------------------------


@dataclass
class ProcessGroup:
    """A scheduler, a publisher and ``workers`` workers, each in a supervised thread.

    The embedded mode (``flowforge run``, ``flowforge demo``): the same loops as
    production, wired to an in-process dispatch channel (or to RabbitMQ when one is
    configured), until a run is terminal or a stop is asked.

    The group acts only on its :attr:`scope` (``app/scope.py``): with ``runs``, those
    runs alone (``flowforge run``: its own run); without, every run whose task types
    all have a handler in ``registry`` (``flowforge run --all``). Its scheduler advances,
    its reaper reclaims, its publisher sends and its start-up redispatch re-sends only
    what the scope takes in; every other run in the database is left exactly as it is
    (no event, no outbox row, no attempt) for its own runner or a deployment.
    """

    app: FlowForge
    transport: Transport
    workers: int = 2
    registry: TaskRegistry = default_registry
    scheduler_interval: float = 0.1
    publisher_interval: float = 0.05
    stop: Stop = field(default_factory=Stop)
    #: The runs this group runs (None: every run its registry has the handlers for).
    runs: Collection[UUID] | None = None
    _supervisor: Supervisor | None = None

    @property
    def errors(self) -> list[BaseException]:
        """Each failed thread's error, in the order they failed."""
        return self._supervisor.errors if self._supervisor is not None else []

    @property
    def scope(self) -> Scope:
        """What this group acts on: its runs, or the runs its registry can run."""
        if self.runs is None:
            return Scope.of_task_types(self.registry)
        return Scope.of_runs(self.runs, self.registry)

    def covers(self, run_id: UUID) -> bool:
        """Whether this group runs the run (see :attr:`scope`)."""
        return self.app.core.covers(self.scope, run_id)

    def start(self) -> None:
        scope = self.scope
        if not self.transport.durable:
            # An in-process channel starts empty: whatever a previous process held in
            # memory is gone, so every ready task of the scope without a pending
            # dispatch gets one.
            self.app.redispatch_stalled(0, scope=scope)
        processes = Processes(self.app, self.transport, self.registry, self.stop)
        supervisor = self._supervisor = processes.supervisor()
        scheduler = processes.scheduler(interval=self.scheduler_interval, scope=scope)
        publisher = processes.publisher(interval=self.publisher_interval, scope=scope)
        supervisor.spawn("scheduler", scheduler.run)
        supervisor.spawn("publisher", publisher.run)
        # worker-1, worker-2 ... of this invocation: the audit log tells one `flowforge
        # run` from another by the suffix (the actor of every claim and finish).
        invocation = uuid.uuid4().hex[:4]
        for number in range(1, self.workers + 1):
            worker_id = f"w{number}-{invocation}"
            supervisor.spawn(f"worker-{number}", processes.worker(worker_id).run)

    def wait_for(
        self,
        run_id: UUID,
        *,
        timeout: float | None = None,
        on_progress: Callable[[WorkflowRunView], None] | None = None,
        poll: float = 0.1,
    ) -> WorkflowRunView:
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
        threads still running are abandoned (daemons, they end with the process). An
        abandoned task keeps its lease until it expires; then the reaper of any later
        scheduler moves it back to ready and it runs again.
        """
        if self._supervisor is None:
            self.stop.set("shutdown")
            return []
        return self._supervisor.join(grace=grace, hurry=hurry)

    def __enter__(self) -> ProcessGroup:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()


def embedded(
    app: FlowForge,
    transport: Transport,
    *,
    workers: int,
    registry: TaskRegistry,
    runs: Collection[UUID] | None,
) -> ProcessGroup:
    """The processes of ``flowforge run``, ``rerun`` and ``demo``: a :class:`ProcessGroup`
    on ``transport`` (:func:`transport_for`, asked before the run exists, so that an
    unreachable broker refuses it first)."""
    return ProcessGroup(app, transport, workers=workers, registry=registry, runs=runs)
