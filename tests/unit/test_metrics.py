"""flowforge/metrics.py: its instruments, nothing until enabled, then real
``prometheus_client`` counters and histograms in the default registry; and the metrics
observer alone, each hook counted in its metric."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from prometheus_client import REGISTRY

from flowforge import metrics, observe
from flowforge.metrics import Instrument


def test_an_instrument_counts_nothing_until_it_is_made_real_then_counts() -> None:
    counter = Instrument("counter", "flowforge_test_things", "Things.", ["kind"])
    counter.labels("a").inc()
    counter.inc(5)
    assert counter.real is None
    assert REGISTRY.get_sample_value("flowforge_test_things_total", {"kind": "a"}) is None

    counter.make_real()
    counter.make_real()  # once only: a second registration would raise
    counter.labels("a").inc()
    counter.labels("a").inc(2)
    assert REGISTRY.get_sample_value("flowforge_test_things_total", {"kind": "a"}) == 3


def test_a_histogram_observes_once_real() -> None:
    histogram = Instrument("histogram", "flowforge_test_seconds", "Seconds.", ["kind"])
    histogram.labels("a").observe(0.5)
    histogram.make_real()
    histogram.labels("a").observe(0.02)
    assert REGISTRY.get_sample_value("flowforge_test_seconds_count", {"kind": "a"}) == 1
    bucket = {"kind": "a", "le": "0.025"}
    assert REGISTRY.get_sample_value("flowforge_test_seconds_bucket", bucket) == 1


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_the_metrics_observer_counts_each_hook_in_its_metric() -> None:
    # The observer alone, told directly (the seam's own tests cover the telling).
    metrics.enable()
    observer = metrics.Metrics()
    ready_at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    attempt = observe.Attempt(
        uuid4(),
        uuid4(),
        "k",
        "probe_type",
        1,
        1,
        "w",
        ready_at=ready_at,
        claimed_at=ready_at + timedelta(seconds=2),
    )
    told: list[tuple[Callable[[], object], str, dict[str, str], float]] = [
        (
            lambda: observer.transitions_committed([("task_run", "claim")] * 2),
            "flowforge_transitions_total",
            {"machine": "task_run", "edge": "claim"},
            2,
        ),
        (
            lambda: observer.reconnected("broker"),
            "flowforge_reconnects_total",
            {"server": "broker"},
            1,
        ),
        (lambda: observer.leases_reaped(3), "flowforge_leases_reaped_total", {}, 3),
        (lambda: observer.attempts_timed_out(2), "flowforge_tasks_timed_out_total", {}, 2),
        (lambda: observer.workers_lost_too_often(2), "flowforge_tasks_worker_lost_total", {}, 2),
        (
            lambda: observer.tasks_redispatched("queue_short", 3),
            "flowforge_redispatched_total",
            {"reason": "queue_short"},
            3,
        ),
        (
            lambda: observer.dispatches_published(4),
            "flowforge_dispatches_total",
            {"outcome": "published"},
            4,
        ),
        (
            lambda: observer.dispatches_confirmed(5),
            "flowforge_dispatches_total",
            {"outcome": "confirmed"},
            5,
        ),
        (
            lambda: observer.dispatches_returned(6),
            "flowforge_dispatches_total",
            {"outcome": "returned"},
            6,
        ),
        (
            lambda: observer.claim_skipped("not ready"),
            "flowforge_claims_skipped_total",
            {"reason": "not ready"},
            1,
        ),
        (
            lambda: observer.attempt_started(attempt),
            "flowforge_ready_to_claimed_seconds_sum",
            {"task_type": "probe_type"},
            2.0,
        ),
        (
            lambda: observer.handler_returned("probe_type", "fail", 0.25),
            "flowforge_handler_seconds_sum",
            {"task_type": "probe_type", "outcome": "fail"},
            0.25,
        ),
        (observer.stale_finish, "flowforge_stale_finishes_total", {}, 1),
        (observer.dead_lettered, "flowforge_dispatches_dead_lettered_total", {}, 1),
        (observer.heartbeat_failed, "flowforge_heartbeat_failures_total", {}, 1),
    ]
    for tell, name, labels, added in told:
        before = sample(name, labels)
        tell()
        assert sample(name, labels) - before == pytest.approx(added), name


def test_a_dispatchs_wait_needs_both_times_and_is_never_negative() -> None:
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    assert metrics.ready_to_claimed(at, at + timedelta(seconds=1.5)) == 1.5
    assert metrics.ready_to_claimed(at, at - timedelta(seconds=1)) == 0.0
    assert metrics.ready_to_claimed(None, at) is None
