"""A run is one trace across real processes (docs/observability.md, "Traces"): the
``submit`` command's creation span is the parent of every attempt's span, each recorded
by the worker that claimed it, on PostgreSQL and RabbitMQ (the context travels in the
dispatch's headers). And FlowForge's own set-up from OpenTelemetry's variables
(``OTEL_TRACES_EXPORTER=console``) exports the spans of ``flowforge run``."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import EXAMPLE, Cli, make_cli, run_example_in_production


def spans_in(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def service(span: dict[str, Any]) -> str:
    return str(span["resource"]["attributes"]["service.name"])


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_the_submitting_commands_span_is_the_parent_of_every_attempt_in_the_workers(
    production: Cli, tmp_path: Path
) -> None:
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    env = {**production.env, "FLOWFORGE_TEST_SPANS": str(spans_dir)}
    cli = replace(production, env=env, module="tests.e2e.recording_spans")
    assert cli("db", "init").returncode == 0
    run_id, processes = run_example_in_production(cli, tmp_path, workers=("w1", "w2"))

    spans = spans_in(spans_dir)
    of_run = [s for s in spans if s["attributes"].get("flowforge.workflow_run_id") == run_id]
    (root,) = [s for s in of_run if s["name"] == "workflow fan_out"]
    assert service(root) == "flowforge-submit" and root["parent_id"] is None
    attempts = [s for s in of_run if s["name"].startswith("task ")]
    claims = [e for e in cli.json("history", run_id) if e["transition"] == "claim"]
    assert sorted(
        (
            s["attributes"]["flowforge.task_key"],
            s["attributes"]["flowforge.attempt"],
            s["attributes"]["flowforge.fencing_token"],
            s["attributes"]["flowforge.worker_id"],
        )
        for s in attempts
    ) == sorted(
        (c["task_key"], c["attempt"], c["fencing_token"], c["lease_owner"]) for c in claims
    )
    for attempt in attempts:
        assert service(attempt) == "flowforge-worker"
        assert attempt["context"]["trace_id"] == root["context"]["trace_id"]
        assert attempt["parent_id"] == root["context"]["span_id"]
    assert {s["resource"]["attributes"]["process.pid"] for s in attempts} <= {
        processes[name].pid for name in ("w1", "w2")
    }


def test_submit_with_the_console_exporter_prints_only_the_run_id_on_stdout(
    tmp_path: Path,
) -> None:
    cli = make_cli(tmp_path)
    assert cli("db", "init").returncode == 0
    cli = replace(cli, env={**cli.env, "OTEL_TRACES_EXPORTER": "console"})
    done = cli("submit", EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"[0-9a-f-]{36}\n", done.stdout), done.stdout
    assert any(s["name"] == "workflow fan_out" for s in console_spans(done.stderr))


def console_spans(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter printed among the command's own lines."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := stdout.find("{\n", at)) != -1:
        span, at = decoder.raw_decode(stdout, start)
        found.append(span)
    return found


def test_flowforge_sets_up_the_exporter_the_environment_names(tmp_path: Path) -> None:
    cli = make_cli(tmp_path)
    cli = replace(cli, env={**cli.env, "OTEL_TRACES_EXPORTER": "console"})
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=4", timeout=120)
    assert done.returncode == 0, done.stderr
    # On stderr: stdout is the command's answer (issue #49: `RUN=$(flowforge submit)`).
    assert console_spans(done.stdout) == []
    spans = console_spans(done.stderr)
    (root,) = [s for s in spans if s["name"] == "workflow fan_out"]
    attempts = [s for s in spans if s["name"].startswith("task ")]
    # fan_out.toml: five tasks, and enrich fails once.
    assert sorted(s["name"] for s in attempts) == sorted(
        f"task {key}" for key in ("extract", "clean", "enrich", "enrich", "score", "load")
    )
    assert {s["parent_id"] for s in attempts} == {root["context"]["span_id"]}
    assert {service(s) for s in spans} == {"flowforge-run"}
