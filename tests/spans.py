"""Recording OpenTelemetry spans in a test: an SDK tracer provider with the SDK's
in-memory exporter, set as the process's global one, and the traces observer installed
(``flowforge.observe``), for the test only."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from flowforge import observe, tracing


def _reset_global_provider() -> None:
    # What OpenTelemetry's own test utilities do: the API sets the global provider
    # once per process, and a test must leave none behind.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    # FlowForge's tracer is made once per process, bound to the first provider.
    tracing._tracer.cache_clear()


@contextmanager
def recorded() -> Iterator[InMemorySpanExporter]:
    """Every span ended meanwhile, in the exporter; no provider before or after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_global_provider()
    trace.set_tracer_provider(provider)
    try:
        with observe.installed(tracing.TRACES):
            yield exporter
    finally:
        provider.shutdown()
        _reset_global_provider()


def named(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def of_run(spans: Sequence[ReadableSpan], run_id: object) -> list[ReadableSpan]:
    return [
        span
        for span in spans
        if span.attributes is not None
        and span.attributes.get(tracing.WORKFLOW_RUN_ID) == str(run_id)
    ]
