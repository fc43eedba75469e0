"""OpenTelemetry traces (docs/observability.md, "Traces"): a run is one trace across
processes.

Optional: ``pip install 'flowforge[otel]'``. Without OpenTelemetry installed every
function here does nothing (one import attempt per process), and with it installed but
no tracer provider configured, OpenTelemetry's own no-op tracer does nothing.

- A run's creation is a span (:class:`RunTrace`); its context (W3C ``traceparent``, as
  the configured propagator writes it) is stored with the run, in its creation event.
- Each dispatch carries its run's context in its message headers
  (``flowforge.app.dispatch.headers_for``).
- Each attempt is a span from its claim to its finish (:class:`AttemptSpan`), a child of
  the run's span, with the task key, attempt and fencing token as attributes; the handler
  runs with it as the current span, so the handler's own spans nest inside.

Only this module imports ``opentelemetry`` (an import-linter contract).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any
from uuid import UUID

from flowforge import errors

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
UNWRITTEN = "unwritten"

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


# --- a run's creation -------------------------------------------------------------------


class RunTrace:
    """The span of a run's creation (``with run_trace(...) as trace``): ``context`` is
    what the run stores, None when nothing records (or OpenTelemetry is not installed).
    It is the child of the caller's current span, if any (a request that submits)."""

    def __init__(
        self,
        workflow_name: str,
        actor: str,
        lost_races: tuple[type[BaseException], ...] = (),
    ) -> None:
        #: What, raised in the block, means another process created the run: not an error.
        self._lost_races = lost_races
        self._span: Any = None
        self.context: dict[str, str] | None = None
        if installed():
            self._span = _tracer().start_span(
                f"workflow {workflow_name}",
                kind=_api().SpanKind.PRODUCER,  # type: ignore[union-attr]
                attributes={WORKFLOW: workflow_name, ACTOR: actor},
            )
            self.context = _inject(self._span)

    def created(self, run_id: UUID, created: bool) -> None:
        """The run's id; ``created`` False: an idempotency key found an earlier run,
        whose own context stays the one its tasks carry."""
        if self._span is not None:
            self._span.set_attribute(WORKFLOW_RUN_ID, str(run_id))
            self._span.set_attribute(RUN_CREATED, created)

    def __enter__(self) -> RunTrace:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is None:
            return
        if isinstance(exc, self._lost_races):
            self._span.set_attribute(RUN_CREATED, False)
        elif exc is not None:
            _failed(self._span, type(exc).__name__, str(exc))
        self._span.end()


def run_trace(
    workflow_name: str, actor: str, lost_races: tuple[type[BaseException], ...] = ()
) -> RunTrace:
    """The span of a run's creation (:class:`RunTrace`); an exception of ``lost_races``
    ends it as a run not created (another process created it), not as an error."""
    return RunTrace(workflow_name, actor, lost_races)


# --- an attempt -------------------------------------------------------------------------


def now_ns() -> int:
    """A span's start time, taken before the claim it may belong to."""
    return time.time_ns()


@dataclass(frozen=True, slots=True)
class Attempt:
    """What an attempt's span says of it."""

    task_run_id: UUID
    workflow_run_id: UUID
    task_key: str
    task_type: str
    attempt: int
    fencing_token: int
    worker_id: str

    def attributes(self) -> dict[str, str | int]:
        return {
            TASK_RUN_ID: str(self.task_run_id),
            WORKFLOW_RUN_ID: str(self.workflow_run_id),
            TASK_KEY: self.task_key,
            TASK_TYPE: self.task_type,
            ATTEMPT: self.attempt,
            FENCING_TOKEN: self.fencing_token,
            WORKER_ID: self.worker_id,
        }


class AttemptSpan:
    """One attempt, from its claim to its finish: a child of its run's span (from the
    dispatch's ``trace_context``), or a root where the dispatch carries none."""

    def __init__(
        self, trace_context: Mapping[str, str], attempt: Attempt, *, started_ns: int
    ) -> None:
        self._span: Any = None
        if not installed():
            return
        from opentelemetry import propagate  # noqa: PLC0415

        self._span = _tracer().start_span(
            f"task {attempt.task_key}",
            context=propagate.extract(dict(trace_context)) if trace_context else None,
            kind=_api().SpanKind.CONSUMER,  # type: ignore[union-attr]
            attributes=attempt.attributes(),
            start_time=started_ns,
        )

    @contextmanager
    def current(self) -> Iterator[None]:
        """This span as the current one (in the thread that runs the handler): the
        handler's own spans are its children."""
        if self._span is None:
            yield
            return
        api = _api()
        assert api is not None
        with api.use_span(self._span, end_on_exit=False, record_exception=False):
            yield

    def end(self, outcome: str, error: Mapping[str, str] | None = None) -> str:
        """The attempt finished: ``outcome`` succeed, fail or stale (returned, for the
        caller's own use); ``error`` a failure's type and message (never its
        traceback: it may hold data). Only the first end counts."""
        span, self._span = self._span, None
        if span is not None:
            span.set_attribute(OUTCOME, outcome)
            if error is not None:
                _failed(span, error.get("type", "error"), error.get("message", ""))
            span.end()
        return outcome

    def __enter__(self) -> AttemptSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Ends a span nothing ended: an error went up before its outcome was written."""
        self.unwritten(exc)

    def unwritten(self, exc: BaseException | None) -> None:
        """End it: the outcome was not written (``exc``: why), and is kept for the
        dispatch's redelivery."""
        error = None if exc is None else {"type": type(exc).__name__, "message": str(exc)}
        self.end(UNWRITTEN, error)


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
    provider = TracerProvider(resource=Resource.create(named))
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    api.set_tracer_provider(provider)
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

        return ConsoleSpanExporter()
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
