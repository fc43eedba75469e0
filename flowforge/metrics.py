"""Prometheus metrics: what every FlowForge process counts, defined once
(docs/observability.md lists each with its meaning and an alert worth setting), and the
observer that counts them (:class:`Metrics`, an observer of ``flowforge.observe``).

Each process counts what it did itself (Prometheus sums across processes); label values
are bounded: a machine, an edge, a task type, a server kind, never an id. A process
serves them on ``/metrics`` when started with ``--metrics-port`` (:func:`serve`). Until
then (:func:`enable`) the observer is not installed, every instrument does nothing and
``prometheus_client`` is not even imported: a process without metrics pays an empty
hook call per event, and a CLI command's start-up nothing. Only this module imports
``prometheus_client`` (an import-linter contract).

The database's own figures (tasks by state, the outbox's backlog) are read at scrape
time by :class:`DatabaseCollector`, in the scheduler only: one cheap query per scrape,
not one per worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from flowforge import observe

#: Handler durations and write latencies: from a millisecond to ten minutes.
SECONDS_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)


class Instrument:
    """A counter or a histogram that does nothing until :func:`enable` makes it real."""

    def __init__(self, kind: str, name: str, documentation: str, labels: Sequence[str]):
        self._kind, self.name, self._documentation = kind, name, documentation
        self._labels = tuple(labels)
        self.real: Any = None

    def make_real(self) -> None:
        import prometheus_client  # noqa: PLC0415  (only a process that serves metrics)

        if self.real is not None:
            return
        if self._kind == "counter":
            self.real = prometheus_client.Counter(self.name, self._documentation, self._labels)
        else:
            self.real = prometheus_client.Histogram(
                self.name, self._documentation, self._labels, buckets=SECONDS_BUCKETS
            )

    def labels(self, *values: str) -> Instrument | Any:
        return _OFF if self.real is None else self.real.labels(*values)

    def inc(self, amount: float = 1.0) -> None:
        if self.real is not None:
            self.real.inc(amount)

    def observe(self, value: float) -> None:
        if self.real is not None:
            self.real.observe(value)


class _Off:
    """What ``labels()`` gives while metrics are off."""

    def inc(self, amount: float = 1.0) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_OFF: Any = _Off()
INSTRUMENTS: list[Instrument] = []
_ENABLING = threading.Lock()


def _counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Instrument:
    INSTRUMENTS.append(Instrument("counter", name, documentation, labels))
    return INSTRUMENTS[-1]


def _histogram(name: str, documentation: str, labels: Sequence[str] = ()) -> Instrument:
    INSTRUMENTS.append(Instrument("histogram", name, documentation, labels))
    return INSTRUMENTS[-1]


TRANSITIONS = _counter(
    "flowforge_transitions",
    "Transitions this process took and committed, by state machine and edge.",
    ["machine", "edge"],
)
CLAIMS_SKIPPED = _counter(
    "flowforge_claims_skipped",
    "Dispatches this worker acked without running a handler, by reason: the task was "
    "claimed elsewhere (a lost race), not ready (a stale or duplicate dispatch), held by a "
    "concurrency limit, twice in one batch, or its lease lost while it waited in its batch.",
    ["reason"],
)
STALE_FINISHES = _counter(
    "flowforge_stale_finishes",
    "Outcomes this worker discarded: the attempt's lease was lost (reaped, timed out, "
    "cancelled) and its fencing token was stale.",
)
LEASES_REAPED = _counter(
    "flowforge_leases_reaped", "Tasks this scheduler reclaimed after their lease expired."
)
TIMED_OUT = _counter(
    "flowforge_tasks_timed_out", "Attempts this scheduler failed for running past their timeout."
)
REDISPATCHED = _counter(
    "flowforge_redispatched",
    "Ready tasks this scheduler gave a new dispatch, by reason: their type's queue held "
    "fewer messages than tasks waiting on it (queue_short: dead-lettered, purged or lost), "
    "or an embedded runner started with its in-process channel empty (runner_started).",
    ["reason"],
)
WORKER_LOST = _counter(
    "flowforge_tasks_worker_lost",
    "Attempts this scheduler's reaper failed (WorkerLost) at their bound of lost workers.",
)
DISPATCHES = _counter(
    "flowforge_dispatches",
    "Dispatches this publisher sent to the broker (published), that the broker confirmed "
    "(confirmed), and that it returned as unroutable (returned).",
    ["outcome"],
)
DEAD_LETTERED = _counter(
    "flowforge_dispatches_dead_lettered",
    "Messages this worker rejected to the dead-letter queue: not a dispatch it can read.",
)
HEARTBEAT_FAILURES = _counter(
    "flowforge_heartbeat_failures",
    "Lease renewals that failed (the database unreachable); a lost lease is not one.",
)
RECONNECTS = _counter(
    "flowforge_reconnects",
    "Reconnections after a lost connection, by server: database or broker.",
    ["server"],
)
HANDLER_SECONDS = _histogram(
    "flowforge_handler_seconds",
    "How long handlers ran, by task type and outcome (succeed or fail).",
    ["task_type", "outcome"],
)

READY_TO_CLAIMED = _histogram(
    "flowforge_ready_to_claimed_seconds",
    "How long a dispatch waited from its outbox row (the task became ready, or a limit "
    "released it) to its claim, by the database's clock, by task type.",
    ["task_type"],
)


class Metrics(observe.Observer):
    """Counts what the seam announces into the instruments above (real by then)."""

    def transitions_committed(self, taken: Sequence[tuple[str, str]]) -> None:
        for machine, edge in taken:
            TRANSITIONS.labels(machine, edge).inc()

    def reconnected(self, server: str) -> None:
        RECONNECTS.labels(server).inc()

    def leases_reaped(self, count: int) -> None:
        LEASES_REAPED.inc(count)

    def attempts_timed_out(self, count: int) -> None:
        TIMED_OUT.inc(count)

    def tasks_redispatched(self, reason: str, count: int) -> None:
        REDISPATCHED.labels(reason).inc(count)

    def workers_lost_too_often(self, count: int) -> None:
        WORKER_LOST.inc(count)

    def dispatches_published(self, count: int) -> None:
        DISPATCHES.labels("published").inc(count)

    def dispatches_confirmed(self, count: int) -> None:
        DISPATCHES.labels("confirmed").inc(count)

    def dispatches_returned(self, count: int) -> None:
        DISPATCHES.labels("returned").inc(count)

    def claim_skipped(self, reason: str) -> None:
        CLAIMS_SKIPPED.labels(reason).inc()

    def attempt_started(self, attempt: observe.Attempt) -> None:
        """How long its dispatch waited, from its outbox row to its claim, both by the
        database's clock (one clock, no worker's skew)."""
        waited = ready_to_claimed(attempt.ready_at, attempt.claimed_at)
        if waited is not None:
            READY_TO_CLAIMED.labels(attempt.task_type).observe(waited)

    def handler_returned(self, task_type: str, outcome: str, seconds: float) -> None:
        HANDLER_SECONDS.labels(task_type, outcome).observe(seconds)

    def stale_finish(self) -> None:
        STALE_FINISHES.inc()

    def dead_lettered(self) -> None:
        DEAD_LETTERED.inc()

    def heartbeat_failed(self) -> None:
        HEARTBEAT_FAILURES.inc()


def ready_to_claimed(ready_at: datetime | None, claimed_at: datetime | None) -> float | None:
    """Seconds from a dispatch's outbox row to its claim (never negative), or None where
    either time is unknown (a dispatch from a FlowForge without the header)."""
    if ready_at is None or claimed_at is None:
        return None
    return max((claimed_at - ready_at).total_seconds(), 0.0)


#: The one Metrics observer a process installs.
OBSERVER = Metrics()


def enable() -> None:
    """Make every instrument real and install the observer (idempotent): from now on
    this process counts."""
    with _ENABLING:
        for instrument in INSTRUMENTS:
            instrument.make_real()
    observe.install(OBSERVER)


def serve(port: int, host: str = "0.0.0.0") -> None:  # noqa: S104  (Prometheus scrapes from afar)
    """Count from now on, and serve this process's metrics on
    ``http://HOST:PORT/metrics`` from a thread."""
    from prometheus_client import start_http_server  # noqa: PLC0415

    enable()
    start_http_server(port, addr=host)


class Backlog(Protocol):
    """What the database says at one scrape (``FlowForge.backlog``)."""

    @property
    def tasks_by_state(self) -> Mapping[str, int]: ...
    @property
    def outbox_pending(self) -> int: ...
    @property
    def outbox_oldest_age_s(self) -> float: ...


class DatabaseCollector:
    """The database's figures, read at each scrape (by ``read``: one query); a
    ``prometheus_client`` collector."""

    def __init__(self, read: Callable[[], Backlog]) -> None:
        self._read = read

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        figures = self._read()
        tasks = GaugeMetricFamily(
            "flowforge_tasks", "Unfinished task runs by state, now.", labels=["state"]
        )
        for state, count in sorted(figures.tasks_by_state.items()):
            tasks.add_metric([state], count)
        yield tasks
        yield GaugeMetricFamily(
            "flowforge_outbox_pending",
            "Dispatches written but not yet confirmed by the broker.",
            value=figures.outbox_pending,
        )
        yield GaugeMetricFamily(
            "flowforge_outbox_oldest_age_seconds",
            "How long the oldest unconfirmed dispatch has waited (0 with none).",
            value=figures.outbox_oldest_age_s,
        )


def collect_database(read: Callable[[], Backlog]) -> None:
    """Have this process's ``/metrics`` include the database's figures."""
    from prometheus_client import REGISTRY  # noqa: PLC0415

    REGISTRY.register(DatabaseCollector(read))
