"""OpenTelemetry traces (docs/observability.md, "Traces"): a run is one trace across
processes, recorded by :class:`Traces`, an observer of ``flowforge.observe``.

Optional: ``pip install 'flowforge[otel]'``. A process installs the observer only when
traces are asked for (:func:`configure`) or a tracer provider was set before it started
(:func:`provider_set`); without it nothing here runs. Installed without OpenTelemetry,
it records nothing.

- A run's creation is a span (:class:`RunTrace`); its context (W3C ``traceparent``, as
  the configured propagator writes it) is stored with the run, in its creation event.
- Each dispatch carries its run's context in its message headers
  (``flowforge.app.dispatch.headers_for``).
- Each attempt is a span from its claim to its finish (:class:`AttemptSpan`), a child of
  the run's span, with the task key, attempt and fencing token as attributes; the handler
  runs with it as the current span, so the handler's own spans nest inside, and it ends
  even when the handler or the outcome's write raises (``observe.AttemptWatch``).

Only this module imports ``opentelemetry`` (an import-linter contract).
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import sys
import threading
import urllib.parse
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import ModuleType, TracebackType
from typing import Any, cast

from flowforge import errors, observe

#: The instrumentation scope every FlowForge span is recorded under.
TRACER_NAME = "flowforge"

#: The attributes FlowForge's spans carry, named once.
WORKFLOW = "flowforge.workflow"
WORKFLOW_RUN_ID = "flowforge.workflow_run_id"
RUN_CREATED = "flowforge.run_created"
ACTOR = "flowforge.actor"
TASK_RUN_ID = "flowforge.task_run_id"
TASK_KEY = "flowforge.task_key"
TASK_TYPE = "flowforge.task_type"
ATTEMPT = "flowforge.attempt"
FENCING_TOKEN = "flowforge.fencing_token"  # noqa: S105  (an attribute name)
WORKER_ID = "flowforge.worker_id"
#: How the attempt ended: succeed, fail, stale (its lease was lost), or unwritten (its
#: outcome's write failed; the worker keeps it for the dispatch's redelivery).
OUTCOME = "flowforge.outcome"
UNWRITTEN = observe.UNWRITTEN

#: The exporters :func:`configure` sets up from ``OTEL_TRACES_EXPORTER``.
EXPORTERS = ("otlp", "console")
INSTALL_HINT = "pip install 'flowforge[otel]'"


@functools.cache
def _api() -> ModuleType | None:
    """``opentelemetry.trace``, or None where OpenTelemetry is not installed."""
    try:
        from opentelemetry import trace  # noqa: PLC0415  (optional)
    except ImportError:
        return None
    return trace


def installed() -> bool:
    return _api() is not None


@functools.cache
def _tracer() -> Any:
    """FlowForge's tracer, made once: until a provider is set it is OpenTelemetry's
    proxy, which then delegates to that provider's."""
    api = _api()
    assert api is not None
    return api.get_tracer(TRACER_NAME)


def _inject(span: Any) -> dict[str, str] | None:
    """The carrier of ``span``'s context, or None for a span that records nothing (no
    tracer provider is configured): nothing is stored then."""
    from opentelemetry import propagate  # noqa: PLC0415

    api = _api()
    assert api is not None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=api.set_span_in_context(span))
    return carrier or None


# --- the observer -----------------------------------------------------------------------


class Traces(observe.Observer):
    """A run's creation and each attempt as spans (an observer of ``flowforge.observe``);
    without OpenTelemetry installed it records nothing."""

    carries_trace_context = True

    def run_creation(self, creation: observe.RunCreation) -> RunTrace | None:
        return RunTrace(creation) if installed() else None

    def attempt_started(self, attempt: observe.Attempt) -> AttemptSpan | None:
        return AttemptSpan(attempt) if installed() else None


#: The one Traces observer a process installs.
TRACES = Traces()


def provider_set() -> bool:
    """Whether a tracer provider was set before FlowForge starts (by
    ``opentelemetry-instrument``, or a program that embeds FlowForge): it imported
    OpenTelemetry then, so a process that did not pays no import to find out."""
    if "opentelemetry.trace" not in sys.modules:
        return False
    api = _api()
    return api is not None and not isinstance(api.get_tracer_provider(), api.ProxyTracerProvider)


# --- a run's creation -------------------------------------------------------------------


class RunTrace:
    """The span of a run's creation: the run stores its context (``creation.context``,
    None when nothing records). It is the child of the caller's current span, if any (a
    request that submits); an exception of ``creation.lost_races`` ends it as a run not
    created (another process created it), not as an error."""

    def __init__(self, creation: observe.RunCreation) -> None:
        self._creation = creation
        self._span = _tracer().start_span(
            f"workflow {creation.workflow_name}",
            kind=_api().SpanKind.PRODUCER,  # type: ignore[union-attr]
            attributes={WORKFLOW: creation.workflow_name, ACTOR: creation.actor},
        )
        creation.context = _inject(self._span)

    def __enter__(self) -> RunTrace:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        creation = self._creation
        if creation.run_id is not None:
            # ``was_created`` False: an idempotency key found an earlier run, whose own
            # context stays the one its tasks carry.
            self._span.set_attribute(WORKFLOW_RUN_ID, str(creation.run_id))
            self._span.set_attribute(RUN_CREATED, creation.was_created)
        if isinstance(exc, creation.lost_races):
            self._span.set_attribute(RUN_CREATED, False)
        elif exc is not None:
            _failed(self._span, type(exc).__name__, str(exc))
        self._span.end()


# --- an attempt -------------------------------------------------------------------------


def attributes(attempt: observe.Attempt) -> dict[str, str | int]:
    """What an attempt's span says of it."""
    return {
        TASK_RUN_ID: str(attempt.task_run_id),
        WORKFLOW_RUN_ID: str(attempt.workflow_run_id),
        TASK_KEY: attempt.task_key,
        TASK_TYPE: attempt.task_type,
        ATTEMPT: attempt.attempt,
        FENCING_TOKEN: attempt.fencing_token,
        WORKER_ID: attempt.worker_id,
    }


class AttemptSpan:
    """One attempt, from just before its claim (``attempt.started_ns``) to its end: a
    child of its run's span (from the dispatch's trace context), or a root where the
    dispatch carries none. The seam's ``AttemptWatch`` ends it once."""

    def __init__(self, attempt: observe.Attempt) -> None:
        from opentelemetry import propagate  # noqa: PLC0415

        context = attempt.trace_context
        self._span = _tracer().start_span(
            f"task {attempt.task_key}",
            context=propagate.extract(dict(context)) if context else None,
            kind=_api().SpanKind.CONSUMER,  # type: ignore[union-attr]
            attributes=attributes(attempt),
            start_time=attempt.started_ns,
        )

    def current(self) -> AbstractContextManager[None]:
        """This span as the current one (in the thread that runs the handler): the
        handler's own spans are its children."""
        api = _api()
        assert api is not None
        return cast(
            "AbstractContextManager[None]",
            api.use_span(self._span, end_on_exit=False, record_exception=False),
        )

    def end(self, outcome: str, error: Mapping[str, str] | None = None) -> None:
        """The attempt ended: ``outcome`` succeed, fail, stale or unwritten; ``error`` a
        failure's type and message (never its traceback: it may hold data)."""
        self._span.set_attribute(OUTCOME, outcome)
        if error is not None:
            _failed(self._span, error.get("type", "error"), error.get("message", ""))
        self._span.end()


def _failed(span: Any, error_type: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"[:200]))


# --- a process's exporter ---------------------------------------------------------------


def configure(service_name: str) -> bool:
    """Export this process's spans if the environment asks for it; whether it does.

    ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, comma-separated, or ``none``) or an
    OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``..._TRACES_ENDPOINT``, then
    ``otlp``) turns it on, with OpenTelemetry's own variables for the rest; the service
    is ``OTEL_SERVICE_NAME`` or ``service_name``. A tracer provider set before (by
    ``opentelemetry-instrument``, or the program that embeds FlowForge) is kept as it is.
    """
    names = _exporter_names()
    if not names:
        return False
    if not installed():
        raise errors.ConfigurationError(
            f"OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT ask for traces, but "
            f"OpenTelemetry is not installed: {INSTALL_HINT}, or unset them"
        )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    api = _api()
    assert api is not None
    if isinstance(api.get_tracer_provider(), TracerProvider):
        return True
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    # Not the SDK's own exit hook: it waits out a dead collector's retries (11 s a
    # command, measured); ours drops the spans then (_flush_at_exit).
    provider = TracerProvider(resource=Resource.create(named), shutdown_on_exit=False)
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    api.set_tracer_provider(provider)
    atexit.register(_flush_at_exit, provider, "otlp" in names)
    return True


#: How long a process's exit waits for its last spans to reach a collector that answers.
EXIT_FLUSH_S = 5.0
#: How long the exit asks whether the collector answers at all (a TCP connect).
COLLECTOR_PROBE_S = 0.25


def _flush_at_exit(provider: Any, otlp: bool) -> None:
    """Send the last spans on exit, unless the OTLP collector does not answer: a dead
    collector must cost a command nothing (its spans are lost either way)."""
    if otlp and not _collector_answers(_otlp_endpoint()):
        return
    # On a thread of its own, waited for a bounded time: a collector that accepts the
    # connection and then stalls costs at most EXIT_FLUSH_S.
    flushing = threading.Thread(target=provider.shutdown, name="spans-at-exit", daemon=True)
    flushing.start()
    flushing.join(EXIT_FLUSH_S)


def _otlp_endpoint() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "http://localhost:4318"
    )


def _collector_answers(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    default = 443 if parts.scheme == "https" else 4318
    try:
        address = (parts.hostname or "localhost", parts.port or default)
        socket.create_connection(address, timeout=COLLECTOR_PROBE_S).close()
    except (OSError, ValueError):
        return False
    return True


def _exporter_names() -> list[str]:
    setting = os.environ.get("OTEL_TRACES_EXPORTER", "").strip()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not setting:
        return ["otlp"] if endpoint else []
    names = [name.strip().lower() for name in setting.split(",") if name.strip()]
    unknown = sorted(set(names) - {*EXPORTERS, "none"})
    if unknown:
        raise errors.ConfigurationError(
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: FlowForge sets up "
            f"{' and '.join(EXPORTERS)} (or none); for another exporter configure "
            f"OpenTelemetry yourself (opentelemetry-instrument), which FlowForge then uses"
        )
    return [name for name in names if name != "none"]


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

        # stderr: stdout is a command's answer (`RUN=$(flowforge submit ...)`).
        return ConsoleSpanExporter(out=sys.stderr)
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        raise errors.ConfigurationError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}: FlowForge's otel extra exports "
            f"OTLP over http/protobuf only (the collector's port 4318)"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
    except ImportError as exc:
        raise errors.ConfigurationError(
            f"the OTLP exporter is not installed ({exc}): {INSTALL_HINT}"
        ) from None
    return OTLPSpanExporter()
