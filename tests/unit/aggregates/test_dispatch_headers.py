"""A dispatch's headers (telemetry beside its body): the ready time and the trace
context round-trip, and whatever else a delivery carries is never mistaken for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from flowforge.aggregates.dispatch import (
    READY_AT_HEADER,
    dispatch_headers,
    ready_at_of,
    text_headers,
    trace_context_of,
)

aware_times = st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5)), timezone(timedelta(hours=9))])
)
contexts = st.dictionaries(
    st.text(min_size=1).filter(lambda key: key != READY_AT_HEADER), st.text(), max_size=3
)


@given(aware_times, contexts)
def test_the_ready_time_and_the_trace_context_round_trip(
    ready_at: datetime, context: dict[str, str]
) -> None:
    headers = dispatch_headers(ready_at, context)
    assert ready_at_of(headers) == ready_at
    assert trace_context_of(headers) == context


def test_a_dispatch_of_a_run_without_a_trace_context_carries_its_ready_time_only() -> None:
    at = datetime(2026, 12, 3, 12, 0, 0, 250000, tzinfo=UTC)
    assert dispatch_headers(at, None) == {READY_AT_HEADER: "2026-12-03T12:00:00.250000+00:00"}


def test_headers_that_do_not_say_when_give_no_ready_time() -> None:
    assert ready_at_of({}) is None  # a dispatch of an older FlowForge
    assert ready_at_of({READY_AT_HEADER: "yesterday"}) is None
    assert ready_at_of({READY_AT_HEADER: "2026-12-03T12:00:00"}) is None  # no zone
    assert ready_at_of({READY_AT_HEADER: 1733227200}) is None


def test_a_brokers_own_headers_are_not_a_trace_context() -> None:
    delivered = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-delivery-count": 2,
        "x-death": [{"count": 1}],
        READY_AT_HEADER: "2026-12-03T12:00:00+00:00",
    }
    assert trace_context_of(delivered) == {"traceparent": delivered["traceparent"]}
    assert text_headers(delivered) == {
        "traceparent": delivered["traceparent"],
        READY_AT_HEADER: "2026-12-03T12:00:00+00:00",
    }
