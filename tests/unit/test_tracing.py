"""Traces (flowforge/tracing.py, the traces observer), through the seam
(``flowforge.observe``) as the domain calls it: a run's creation span and the context it
stores, an attempt's span as its child with the handler's spans nested in it, what a
failure shows, and a process without OpenTelemetry (or without a provider) recording
nothing."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from uuid import uuid4

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from flowforge import errors, observe, tracing
from tests.spans import recorded

RUN_ID = uuid4()
ATTEMPT = observe.Attempt(
    task_run_id=uuid4(),
    workflow_run_id=RUN_ID,
    task_key="extract",
    task_type="http_get",
    attempt=2,
    fencing_token=7,
    worker_id="w1",
)
announce = observe.announce


def attempt(trace_context: dict[str, str] | None = None, started_ns: int = 0) -> observe.Attempt:
    return replace(ATTEMPT, trace_context=trace_context or {}, started_ns=started_ns)


def test_a_runs_creation_is_a_span_whose_w3c_context_the_run_stores() -> None:
    with recorded() as spans:
        with announce.run_creation("etl", "user") as run:
            run.created(RUN_ID, True)
        (span,) = spans.get_finished_spans()
    assert span.name == "workflow etl"
    assert span.kind is trace.SpanKind.PRODUCER
    assert dict(span.attributes or {}) == {
        tracing.WORKFLOW: "etl",
        tracing.ACTOR: "user",
        tracing.WORKFLOW_RUN_ID: str(RUN_ID),
        tracing.RUN_CREATED: True,
    }
    ids = f"{span.context.trace_id:032x}-{span.context.span_id:016x}"
    assert run.context is not None and set(run.context) == {"traceparent"}
    assert re.fullmatch(f"00-{ids}-[0-9a-f]{{2}}", run.context["traceparent"])


class LostError(Exception):
    pass


def test_a_run_another_process_created_is_not_an_error_but_an_error_is() -> None:
    with recorded() as spans:
        with pytest.raises(LostError), announce.run_creation("etl", "scheduler", (LostError,)):
            raise LostError
        with (
            pytest.raises(ValueError, match="bad"),
            announce.run_creation("etl", "user", (LostError,)),
        ):
            raise ValueError("bad inputs")
        lost, failed = spans.get_finished_spans()
    assert (lost.attributes or {})[tracing.RUN_CREATED] is False
    assert lost.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: bad inputs"


def test_a_run_submitted_inside_a_callers_span_is_its_child() -> None:
    with recorded() as spans:
        with (
            trace.get_tracer("app").start_as_current_span("request"),
            announce.run_creation("etl", "user"),
        ):
            pass
        request, run = sorted(spans.get_finished_spans(), key=lambda s: s.name)
    assert run.parent is not None and run.parent.span_id == request.context.span_id


def test_an_attempt_is_its_runs_child_and_the_handlers_spans_nest_in_it() -> None:
    with recorded() as spans:
        with announce.run_creation("etl", "user") as run:
            assert run.context is not None
        began = time.time_ns()
        watch = announce.attempt_started(attempt(run.context, began))
        with watch.current(), trace.get_tracer("handler").start_as_current_span("fetch page"):
            pass
        assert watch.end("succeed") == "succeed"
        handler_span, attempt_span, run_span = sorted(
            spans.get_finished_spans(), key=lambda s: s.name
        )
    assert attempt_span.name == "task extract"
    assert attempt_span.kind is trace.SpanKind.CONSUMER
    assert attempt_span.start_time == began
    assert attempt_span.context.trace_id == run_span.context.trace_id
    assert attempt_span.parent is not None
    assert attempt_span.parent.span_id == run_span.context.span_id
    assert handler_span.parent is not None
    assert handler_span.parent.span_id == attempt_span.context.span_id
    assert dict(attempt_span.attributes or {}) == {
        tracing.TASK_RUN_ID: str(ATTEMPT.task_run_id),
        tracing.WORKFLOW_RUN_ID: str(RUN_ID),
        tracing.TASK_KEY: "extract",
        tracing.TASK_TYPE: "http_get",
        tracing.ATTEMPT: 2,
        tracing.FENCING_TOKEN: 7,
        tracing.WORKER_ID: "w1",
        tracing.OUTCOME: "succeed",
    }


def test_a_dispatch_without_a_context_starts_a_trace_of_its_own() -> None:
    with recorded() as spans:
        announce.attempt_started(attempt(started_ns=time.time_ns())).end("succeed")
        (span,) = spans.get_finished_spans()
    assert span.parent is None


def test_a_failed_attempt_is_an_error_naming_its_type_and_never_its_traceback() -> None:
    with recorded() as spans:
        span = announce.attempt_started(attempt(started_ns=time.time_ns()))
        error = {"type": "ValueError", "message": "bad row", "traceback": "password=hunter2"}
        span.end("fail", error)
        span.end("succeed")  # only the first end counts
        (failed,) = spans.get_finished_spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: bad row"
    assert (failed.attributes or {})[tracing.OUTCOME] == "fail"
    assert (failed.attributes or {})["error.type"] == "ValueError"
    assert "hunter2" not in repr(dict(failed.attributes or {})) + repr(failed.events)


def test_an_attempt_an_error_left_is_ended_as_unwritten() -> None:
    with recorded() as spans:
        with (
            pytest.raises(errors.DatabaseUnavailableError),
            announce.attempt_started(attempt(started_ns=time.time_ns())),
        ):
            raise errors.DatabaseUnavailableError("the database went away")
        (span,) = spans.get_finished_spans()
    assert (span.attributes or {})[tracing.OUTCOME] == tracing.UNWRITTEN
    assert span.status.description == "DatabaseUnavailableError: the database went away"


def test_without_a_tracer_provider_nothing_is_stored() -> None:
    with observe.installed(tracing.TRACES), announce.run_creation("etl", "user") as run:
        run.created(RUN_ID, True)
    assert run.context is None


def test_without_opentelemetry_installed_every_call_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_api", lambda: None)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with observe.installed(tracing.TRACES):
        with announce.run_creation("etl", "user") as run:
            run.created(RUN_ID, True)
        assert run.context is None
        span = announce.attempt_started(attempt({"traceparent": "00-x-y-01"}))
        with span.current():
            pass
        assert span.end("succeed") == "succeed"
    assert tracing.configure("flowforge-worker") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with pytest.raises(errors.ConfigurationError, match=re.escape("flowforge[otel]")):
        tracing.configure("flowforge-worker")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER names zipkin"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'",
        ),
    ],
)
def test_an_exporter_flowforge_cannot_set_up_is_a_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(errors.ConfigurationError, match=re.escape(message)):
        tracing.configure("flowforge-worker")


def test_no_exporter_asked_for_sets_up_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.configure("flowforge-worker") is False
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    assert tracing.configure("flowforge-worker") is False


def test_a_provider_set_before_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with recorded():
        provider = trace.get_tracer_provider()
        assert tracing.configure("flowforge-worker") is True
        assert trace.get_tracer_provider() is provider


def test_a_dead_collector_costs_a_process_exit_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #49: the SDK's own exit hook waited out the OTLP exporter's retries (11 s a
    command); FlowForge's drops the spans at once when the collector does not answer."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    dead = "http://127.0.0.1:1/v1/traces"
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=dead)))
    with provider.get_tracer("test").start_as_current_span("pending"):
        pass
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", dead)
    began = time.monotonic()
    tracing._flush_at_exit(provider, otlp=True)
    assert time.monotonic() - began < 1.0
