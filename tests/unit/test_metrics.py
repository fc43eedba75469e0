"""flowforge/metrics.py's instruments: nothing until enabled, then real
``prometheus_client`` counters and histograms in the default registry."""

from __future__ import annotations

from prometheus_client import REGISTRY

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
