"""`--log-format json` on the production processes (real scheduler, publisher and worker on
PostgreSQL and RabbitMQ): every line each writes is one JSON object; the lines about a
task carry its run, task, attempt and fencing token; the database's and the broker's
URLs are logged with their passwords masked, and no password appears anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import Cli, run_example_in_production

#: Accepted by PostgreSQL's trust authentication, never asked for: only shown, or not.
SECRET = "s3cr3t-pw"


def entries(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text().splitlines()
    assert lines, f"{log.name} logged nothing"
    return [json.loads(line) for line in lines]  # one object a line, or this raises


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_the_processes_json_logs_parse_line_by_line_and_carry_no_password(
    production: Cli, tmp_path: Path
) -> None:
    url = production.env["FLOWFORGE_DATABASE_URL"].replace("postgres@", f"postgres:{SECRET}@")
    cli = Cli(tmp_path, {**production.env, "FLOWFORGE_DATABASE_URL": url})
    assert cli("db", "init").returncode == 0
    run_id, processes = run_example_in_production(
        cli, tmp_path, workers=("worker",), flags=lambda name: ["--log-format", "json"]
    )

    logged = {name: entries(tmp_path / f"{name}.log") for name in processes}
    for name, lines in logged.items():
        text = (tmp_path / f"{name}.log").read_text()
        assert SECRET not in text and "guest:guest@" not in text, name
        starting = next(e for e in lines if e["message"] == f"{name} starting")
        assert starting["database_url"] == url.replace(SECRET, "***")
        assert starting["broker_url"].startswith("amqp://guest:***@")
        assert all({"time", "level", "logger", "message"} <= set(e) for e in lines)
    finished = [e for e in logged["worker"] if e["message"] == "task finished"]
    assert finished, [e["message"] for e in logged["worker"]]
    for entry in finished:
        assert {"workflow_run_id", "task_run_id", "attempt", "fencing_token"} <= set(entry)
        assert entry["workflow_run_id"] == run_id
