"""The observer seam: what happened, announced once, to whoever watches
(docs/observability.md, "Observers").

The store, the service and the processes announce each thing that happens (transitions
committed, a task claimed or its dispatch skipped, a handler returned, leases reaped,
dispatches published, a run created, ...) by calling :data:`announce`, and nothing else:
metrics, traces and structured logs are each an :class:`Observer` (``flowforge.metrics``,
``flowforge.tracing``, ``flowforge.structured_logs``), installed by a process at start
(``flowforge.observers.install``). As dramatiq's middleware: one hook per event, every
hook a no-op in the base class, an observer overrides the ones it watches.

With nothing installed a hook is one call that loops over an empty tuple: no
``prometheus_client``, no ``opentelemetry``, nothing allocated. Work that a hook must wrap
(a run's creation, an attempt) is a context: :class:`RunCreation` and :class:`AttemptWatch`
enter each observer's part, and end it on every path, an exception's included.

This module imports the standard library only: every layer may announce.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Protocol
from uuid import UUID

#: How an attempt ended when its outcome could not be written (the database failed): the
#: worker keeps the outcome for the dispatch's redelivery.
UNWRITTEN = "unwritten"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a task, as a worker claimed it: what its observers are told."""

    task_run_id: UUID
    workflow_run_id: UUID
    task_key: str
    task_type: str
    attempt: int
    fencing_token: int
    worker_id: str
    #: The run's trace context its dispatch carried (empty: none).
    trace_context: Mapping[str, str] = field(default_factory=dict)
    #: When its dispatch was written and when it was claimed, both by the database's
    #: clock (``ready_at`` None: a dispatch from a FlowForge without the header).
    ready_at: datetime | None = None
    claimed_at: datetime | None = None
    #: When its claim began (``time.time_ns()``, taken before the claim).
    started_ns: int = 0


class AttemptObserver(Protocol):
    """An observer's part in one attempt (an attempt's span, say)."""

    def current(self) -> AbstractContextManager[None]:
        """Entered in the thread that runs the handler, around it."""
        ...

    def end(self, outcome: str, error: Mapping[str, str] | None = None) -> object:
        """The attempt ended: succeed, fail, stale or unwritten; ``error`` a failure's
        type and message (never its traceback)."""
        ...


@dataclass(slots=True)
class RunCreation:
    """A run's creation, in progress (``with announce.run_creation(...) as creation``):
    an observer may set ``context`` on entering (what the run stores: its trace context)
    and reads what :meth:`created` said on leaving."""

    workflow_name: str
    actor: str
    #: What, raised in the block, means another process created the run: not an error.
    lost_races: tuple[type[BaseException], ...] = ()
    observers: tuple[Observer, ...] = ()
    context: dict[str, str] | None = None
    run_id: UUID | None = None
    #: False: an idempotency key found an earlier run (its own context stays).
    was_created: bool = False
    _parts: list[AbstractContextManager[object]] = field(
        default_factory=list, init=False, repr=False
    )

    def created(self, run_id: UUID, created: bool) -> None:
        self.run_id, self.was_created = run_id, created

    def __enter__(self) -> RunCreation:
        # Not an ExitStack: one part (the traces observer's) is the usual case, and this
        # is the run's creation path. A part that fails to enter leaves the ones before.
        try:
            for observer in self.observers:
                part = observer.run_creation(self)
                if part is not None:
                    part.__enter__()
                    self._parts.append(part)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Each part is left, the last entered first; none swallows the error.
        while self._parts:
            self._parts.pop().__exit__(kind, exc, tb)


#: The context of an attempt nobody watches (nullcontext is reusable and reentrant).
_NOTHING: AbstractContextManager[None] = nullcontext()


class AttemptWatch:
    """One attempt, watched from its claim to its end: :meth:`current` around the handler,
    :meth:`end` once its outcome is written (only the first end counts), and as a
    context, ended ``unwritten`` if an error leaves it first."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple[AttemptObserver, ...] = ()) -> None:
        self._parts = parts

    def current(self) -> AbstractContextManager[None]:
        if len(self._parts) == 1:  # the usual case, the traces observer's alone
            return self._parts[0].current()
        return self._current() if self._parts else _NOTHING

    @contextmanager
    def _current(self) -> Iterator[None]:
        with ExitStack() as stack:
            for part in self._parts:
                stack.enter_context(part.current())
            yield

    def end(self, outcome: str, error: Mapping[str, str] | None = None) -> str:
        """End it (``outcome``, returned for the caller's own use); later ends do nothing."""
        parts, self._parts = self._parts, ()
        for part in parts:
            part.end(outcome, error)
        return outcome

    def unwritten(self, exc: BaseException | None) -> None:
        """End it: the outcome was not written (``exc``: why)."""
        error = None if exc is None else {"type": type(exc).__name__, "message": str(exc)}
        self.end(UNWRITTEN, error)

    def __enter__(self) -> AttemptWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unwritten(exc)


class Observer:
    """What happens, one hook each; every hook does nothing here. An observer subclasses
    this and overrides what it watches. Hooks are called on the thread where the thing
    happened, after it happened (a transition after its commit)."""

    #: Whether this observer reads a run's trace context from its dispatches: only then
    #: does a publisher read the runs' contexts to carry them (``Announcer.traced``).
    carries_trace_context = False

    # --- the store ----------------------------------------------------------------------
    def transitions_committed(self, taken: Sequence[tuple[str, str]]) -> None:
        """A transaction committed these transitions, each ``(machine, edge)``."""

    def reconnected(self, server: str) -> None:
        """A lost connection is being replaced: ``database`` or ``broker``."""

    # --- the scheduler ------------------------------------------------------------------
    def leases_reaped(self, count: int) -> None:
        """Tasks reclaimed after their lease expired."""

    def attempts_timed_out(self, count: int) -> None:
        """Attempts failed for running past their timeout."""

    def tasks_redispatched(self, reason: str, count: int) -> None:
        """Ready tasks given a new dispatch by the redispatch net, and why
        (``flowforge/app/redispatch.py``: ``queue_short``, ``runner_started``)."""

    def workers_lost_too_often(self, count: int) -> None:
        """Attempts the reaper failed (WorkerLost) at their task's bound of lost workers."""

    def run_creation(self, creation: RunCreation) -> AbstractContextManager[object] | None:
        """A run is being created: a context around its creation, or None."""
        return None

    # --- the publisher ------------------------------------------------------------------
    def dispatches_published(self, count: int) -> None:
        """Dispatches sent to the broker."""

    def dispatches_confirmed(self, count: int) -> None:
        """Dispatches the broker confirmed."""

    def dispatches_returned(self, count: int) -> None:
        """Dispatches the broker returned as unroutable."""

    # --- the worker ---------------------------------------------------------------------
    def claim_skipped(self, reason: str) -> None:
        """A dispatch acked without running its handler, and why."""

    def attempt_started(self, attempt: Attempt) -> AttemptObserver | None:
        """A task was claimed: this observer's part in the attempt, or None."""
        return None

    def handler_returned(self, task_type: str, outcome: str, seconds: float) -> None:
        """A handler returned (``succeed``) or raised (``fail``) after ``seconds``."""

    def stale_finish(self) -> None:
        """An outcome discarded: the attempt's lease was lost."""

    def dead_lettered(self) -> None:
        """A message rejected to the dead-letter queue: not a dispatch."""

    def heartbeat_failed(self) -> None:
        """A lease renewal failed (the database unreachable; a lost lease is not one)."""


class Announcer:
    """Tells each installed observer, in the order installed (:data:`announce`): one
    method per hook of :class:`Observer` (a test checks that none is missing), except
    that a run's creation and an attempt return the whole context, every observer's
    part in it."""

    def __init__(self) -> None:
        self.observers: tuple[Observer, ...] = ()

    @property
    def watched(self) -> bool:
        """Whether any observer is installed: a caller may skip building what only an
        observer would read."""
        return bool(self.observers)

    @property
    def traced(self) -> bool:
        """Whether an installed observer carries trace context (the traces observer): a
        publisher without one sends no run's context, and skips reading them."""
        return any(observer.carries_trace_context for observer in self.observers)

    def transitions_committed(self, taken: Sequence[tuple[str, str]]) -> None:
        for observer in self.observers:
            observer.transitions_committed(taken)

    def reconnected(self, server: str) -> None:
        for observer in self.observers:
            observer.reconnected(server)

    def leases_reaped(self, count: int) -> None:
        for observer in self.observers:
            observer.leases_reaped(count)

    def attempts_timed_out(self, count: int) -> None:
        for observer in self.observers:
            observer.attempts_timed_out(count)

    def tasks_redispatched(self, reason: str, count: int) -> None:
        for observer in self.observers:
            observer.tasks_redispatched(reason, count)

    def workers_lost_too_often(self, count: int) -> None:
        for observer in self.observers:
            observer.workers_lost_too_often(count)

    def run_creation(
        self,
        workflow_name: str,
        actor: str,
        lost_races: tuple[type[BaseException], ...] = (),
    ) -> RunCreation:
        return RunCreation(workflow_name, actor, lost_races, self.observers)

    def dispatches_published(self, count: int) -> None:
        for observer in self.observers:
            observer.dispatches_published(count)

    def dispatches_confirmed(self, count: int) -> None:
        for observer in self.observers:
            observer.dispatches_confirmed(count)

    def dispatches_returned(self, count: int) -> None:
        for observer in self.observers:
            observer.dispatches_returned(count)

    def claim_skipped(self, reason: str) -> None:
        for observer in self.observers:
            observer.claim_skipped(reason)

    def attempt_started(self, attempt: Attempt) -> AttemptWatch:
        if not self.observers:
            return AttemptWatch()
        parts = (observer.attempt_started(attempt) for observer in self.observers)
        return AttemptWatch(tuple(part for part in parts if part is not None))

    def handler_returned(self, task_type: str, outcome: str, seconds: float) -> None:
        for observer in self.observers:
            observer.handler_returned(task_type, outcome, seconds)

    def stale_finish(self) -> None:
        for observer in self.observers:
            observer.stale_finish()

    def dead_lettered(self) -> None:
        for observer in self.observers:
            observer.dead_lettered()

    def heartbeat_failed(self) -> None:
        for observer in self.observers:
            observer.heartbeat_failed()


#: The one announcer every layer calls.
announce = Announcer()
_INSTALLING = threading.Lock()


def install(observer: Observer) -> None:
    """Have ``observer`` told from now on (once: installing it again does nothing)."""
    with _INSTALLING:
        if observer not in announce.observers:
            announce.observers = (*announce.observers, observer)


def uninstall(observer: Observer) -> None:
    """Stop telling ``observer`` (a test's, once it is done)."""
    with _INSTALLING:
        announce.observers = tuple(o for o in announce.observers if o is not observer)


@contextmanager
def installed(observer: Observer) -> Iterator[Observer]:
    """``observer`` installed for the block only."""
    install(observer)
    try:
        yield observer
    finally:
        uninstall(observer)
