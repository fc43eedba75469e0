"""Prometheus metrics: what every FlowForge process counts, defined once
(docs/observability.md lists each with its meaning and an alert worth setting).

Each process counts what it did itself (Prometheus sums across processes); label values
are bounded: a machine, an edge, a task type, a server kind, never an id. A process
serves them on ``/metrics`` when started with ``--metrics-port`` (:func:`serve`). Until
then (:func:`enable`) every instrument does nothing and ``prometheus_client`` is not even
imported: a process without metrics pays a method call per count, and a CLI command's
start-up nothing.

The database's own figures (tasks by state, the outbox's backlog) are read at scrape
time by :class:`DatabaseCollector`, in the scheduler only: one cheap query per scrape,
not one per worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

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


def enable() -> None:
    """Make every instrument real (idempotent): from now on this process counts."""
    with _ENABLING:
        for instrument in INSTRUMENTS:
            instrument.make_real()


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


def count_transitions(taken: Iterable[tuple[str, str]]) -> None:
    """Count committed transitions, each ``(machine, edge)``: after every commit, so
    nothing at all while metrics are off."""
    if TRANSITIONS.real is None:
        return
    for machine, edge in taken:
        TRANSITIONS.labels(machine, edge).inc()
