"""Prometheus metrics: what every FlowForge process counts, defined once
(docs/observability.md lists each with its meaning and an alert worth setting).

Each process counts what it did itself (Prometheus sums across processes); label values
are bounded: a machine, an edge, a task type, a server kind, never an id. A process
serves them on ``/metrics`` when started with ``--metrics-port`` (:func:`serve`); the
counting costs a lock and an addition, with or without a server.

The database's own figures (tasks by state, the outbox's backlog) are read at scrape
time by :class:`DatabaseCollector`, in the scheduler only: one cheap query per scrape,
not one per worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

#: Handler durations and write latencies: from a millisecond to ten minutes.
SECONDS_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)

TRANSITIONS = Counter(
    "flowforge_transitions",
    "Transitions this process took and committed, by state machine and edge.",
    ["machine", "edge"],
)
CLAIMS_SKIPPED = Counter(
    "flowforge_claims_skipped",
    "Dispatches this worker acked without running a handler, by reason: the task was "
    "claimed elsewhere (a lost race), not ready (a stale or duplicate dispatch), held by a "
    "concurrency limit, twice in one batch, or its lease lost while it waited in its batch.",
    ["reason"],
)
STALE_FINISHES = Counter(
    "flowforge_stale_finishes",
    "Outcomes this worker discarded: the attempt's lease was lost (reaped, timed out, "
    "cancelled) and its fencing token was stale.",
)
LEASES_REAPED = Counter(
    "flowforge_leases_reaped", "Tasks this scheduler reclaimed after their lease expired."
)
TIMED_OUT = Counter(
    "flowforge_tasks_timed_out", "Attempts this scheduler failed for running past their timeout."
)
DISPATCHES = Counter(
    "flowforge_dispatches",
    "Dispatches this publisher sent to the broker (published), that the broker confirmed "
    "(confirmed), and that it returned as unroutable (returned).",
    ["outcome"],
)
DEAD_LETTERED = Counter(
    "flowforge_dispatches_dead_lettered",
    "Messages this worker rejected to the dead-letter queue: not a dispatch it can read.",
)
HEARTBEAT_FAILURES = Counter(
    "flowforge_heartbeat_failures",
    "Lease renewals that failed (the database unreachable); a lost lease is not one.",
)
RECONNECTS = Counter(
    "flowforge_reconnects",
    "Reconnections after a lost connection, by server: database or broker.",
    ["server"],
)
HANDLER_SECONDS = Histogram(
    "flowforge_handler_seconds",
    "How long handlers ran, by task type and outcome (succeed or fail).",
    ["task_type", "outcome"],
    buckets=SECONDS_BUCKETS,
)


def serve(port: int, host: str = "0.0.0.0") -> None:  # noqa: S104  (Prometheus scrapes from afar)
    """Serve this process's metrics on ``http://HOST:PORT/metrics`` from a thread."""
    start_http_server(port, addr=host)


class Backlog(Protocol):
    """What the database says at one scrape (``FlowForge.backlog``)."""

    @property
    def tasks_by_state(self) -> Mapping[str, int]: ...
    @property
    def outbox_pending(self) -> int: ...
    @property
    def outbox_oldest_age_s(self) -> float: ...


class DatabaseCollector(Collector):
    """The database's figures, read at each scrape (by ``read``: one query)."""

    def __init__(self, read: Callable[[], Backlog]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
    REGISTRY.register(DatabaseCollector(read))


def count_transitions(taken: Iterable[tuple[str, str]]) -> None:
    """Count committed transitions, each ``(machine, edge)``."""
    for machine, edge in taken:
        TRANSITIONS.labels(machine, edge).inc()
