"""Traces and the ready-to-claimed latency through a real runner (docs/observability.md,
"Traces"), on both backends and both transports (in-process, and RabbitMQ, where the
context travels in the message headers): each run is one trace, its creation span the
parent of one span per attempt, the attempts the audit log's claims exactly, the
handler's own spans nested in its attempt's, and one latency observation per claim."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from flowforge import metrics, tracing
from flowforge.app.service import FlowForge
from flowforge.bootstrap import ProcessGroup, Transport
from flowforge.processes.registry import TaskContext, TaskRegistry
from tests import topology
from tests.helpers import prometheus_samples
from tests.spans import named, of_run, recorded

REGISTRY_ = TaskRegistry()
WORKFLOW = {
    "name": "traced",
    "retry": {"max_attempts": 2, "backoff_seconds": 0},
    "tasks": [
        {"key": "extract", "type": "traced_extract"},
        {"key": "enrich", "type": "traced_enrich", "depends_on": ["extract"]},
    ],
}


@REGISTRY_.task("traced_extract")
def extract(ctx: TaskContext) -> int:
    with trace.get_tracer("handler").start_as_current_span("fetch page"):
        return 3


@REGISTRY_.task("traced_enrich")
def enrich(ctx: TaskContext) -> int:
    if ctx.attempt == 1:
        raise ValueError("enrichment service said no")
    return int(ctx.upstream["extract"]) + 1


@pytest.fixture(params=["in-process", "rabbitmq"])
def transport(request: pytest.FixtureRequest) -> Iterator[Transport]:
    if request.param == "in-process":
        yield Transport.in_memory()
        return
    with topology.own_topology("traces") as config:
        yield Transport.rabbitmq(config)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def latency_counts() -> Counter[str]:
    samples = prometheus_samples("flowforge_ready_to_claimed_seconds_count")
    return Counter({labels["task_type"]: int(value) for labels, value in samples})


def test_each_run_is_one_trace_with_a_span_per_attempt_and_the_handlers_inside(
    app: FlowForge, transport: Transport
) -> None:
    metrics.enable()
    waited_before = latency_counts()
    with recorded() as exporter:
        runs = [app.start_workflow_run(WORKFLOW) for _ in range(2)]
        with ProcessGroup(app, transport, registry=REGISTRY_, runs=runs) as group:
            for run in runs:
                assert group.wait_for(run, timeout=60).state == "succeeded"
        spans = exporter.get_finished_spans()

    traces = set()
    for run in runs:
        (root,) = named(of_run(spans, run), "workflow traced")
        attempts = named(of_run(spans, run), "task ")
        claims = [e for e in app.run_history(run) if e.transition == "claim"]
        assert sorted(
            (a.name, attrs(a)[tracing.ATTEMPT], attrs(a)[tracing.FENCING_TOKEN]) for a in attempts
        ) == sorted((f"task {c.task_key}", c.attempt, c.fencing_token) for c in claims)
        for attempt in attempts:
            assert attempt.context.trace_id == root.context.trace_id
            assert attempt.parent is not None and attempt.parent.span_id == root.context.span_id
        failed = [a for a in attempts if attrs(a)[tracing.OUTCOME] == "fail"]
        assert [(attrs(a)[tracing.TASK_KEY], attrs(a)[tracing.ATTEMPT]) for a in failed] == [
            ("enrich", 1)
        ]
        assert failed[0].status.status_code is StatusCode.ERROR
        (extract_attempt,) = [a for a in attempts if attrs(a)[tracing.TASK_KEY] == "extract"]
        inner = [
            s
            for s in named(spans, "fetch page")
            if s.parent is not None and s.parent.span_id == extract_attempt.context.span_id
        ]
        assert len(inner) == 1 and inner[0].context.trace_id == root.context.trace_id
        traces.add(root.context.trace_id)
    assert len(traces) == len(runs)

    waited = latency_counts() - waited_before
    assert waited == Counter({"traced_extract": 2, "traced_enrich": 4})
