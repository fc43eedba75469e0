"""``python -m tests.e2e.recording_spans ARGS``: the ``flowforge`` CLI with every span
recorded by the OpenTelemetry SDK's in-memory exporter and written at exit, one JSON
object a line, to ``$FLOWFORGE_TEST_SPANS/<pid>.jsonl``: a real process whose spans a test
reads (tests/e2e/test_traces.py). The provider is set before FlowForge starts, as
``opentelemetry-instrument`` sets one, so FlowForge keeps it."""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flowforge.cli.main import main


def _record() -> None:
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "flowforge")
    resource = Resource.create(
        {"service.name": f"flowforge-{command}", "process.pid": os.getpid()}
    )
    provider = TracerProvider(resource=resource)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    out = Path(os.environ["FLOWFORGE_TEST_SPANS"]) / f"{os.getpid()}.jsonl"

    def write() -> None:
        with out.open("w") as lines:
            for span in exporter.get_finished_spans():
                lines.write(json.dumps(json.loads(span.to_json())) + "\n")

    atexit.register(write)


if __name__ == "__main__":
    _record()
    sys.exit(main())
