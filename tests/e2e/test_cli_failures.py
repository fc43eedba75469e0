"""A handler's failure is visible where a user looks: the worker's log line, and
`status`, `history` and `why` show the error's innermost frames and the tasks' results
(not only --json); on both backends."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from flowforge import FlowForge, ProcessGroup, TaskContext, Transport, task
from tests.e2e.inprocess import InProcess, on_backend

WORKFLOW = {
    "name": "visible",
    "retry": {"max_attempts": 1},
    "tasks": [
        {"key": "count", "type": "visible_count"},
        {"key": "report", "type": "visible_report", "depends_on": ["count"]},
    ],
}


@task("visible_count")
def count(ctx: TaskContext) -> dict[str, Any]:
    return {"rows": 8, "note": "x" * 500}


def pick_column(upstream: Mapping[str, Any]) -> Any:
    return upstream["count"]["clean"]  # the bug the user must find


@task("visible_report")
def report(ctx: TaskContext) -> str:
    return str(pick_column(ctx.upstream))


@pytest.fixture(params=["sqlite", "postgres"])
def failed_run(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> tuple[InProcess, UUID, list[logging.LogRecord]]:
    cli = on_backend(request, tmp_path, capsys, monkeypatch)
    caplog.set_level(logging.INFO, logger="flowforge.processes.worker")
    with FlowForge(cli.database_url) as app:
        run_id = app.start_workflow_run(WORKFLOW)
        with ProcessGroup(app, Transport.in_memory(), workers=1) as group:
            assert group.wait_for(run_id, timeout=60).state == "failed"
    return cli, run_id, list(caplog.records)


def test_the_worker_logs_the_exception_of_a_failed_task(
    failed_run: tuple[InProcess, UUID, list[logging.LogRecord]],
) -> None:
    _, _, records = failed_run
    # Only this run's task: the session's PostgreSQL database may hold other tests' runs.
    (failed,) = [
        r
        for r in records
        if getattr(r, "outcome", None) == "fail" and getattr(r, "task_key", None) == "report"
    ]
    assert failed.error == "KeyError: 'clean'"  # type: ignore[attr-defined]
    assert failed.at.startswith("test_cli_failures.py:")  # type: ignore[attr-defined]
    assert "in pick_column" in failed.at  # type: ignore[attr-defined]
    assert "< test_cli_failures.py:" in failed.at  # type: ignore[attr-defined]
    assert "handler_call" not in failed.at  # type: ignore[attr-defined]


def test_status_shows_the_error_frames_and_the_results(
    failed_run: tuple[InProcess, UUID, list[logging.LogRecord]],
) -> None:
    cli, run_id, _ = failed_run
    out = cli("status", str(run_id)).stdout
    assert "RESULT OR ERROR" in out
    assert '{"rows": 8, "note": "xxxx' in out
    assert "x" * 100 not in out  # the result is cut to fit a line
    assert "report, attempt 1: KeyError: 'clean'" in out
    assert "at test_cli_failures.py:" in out
    assert 'in pick_column: return upstream["count"]["clean"]' in out


def test_history_shows_where_it_failed_and_what_succeeded_returned(
    failed_run: tuple[InProcess, UUID, list[logging.LogRecord]],
) -> None:
    cli, run_id, _ = failed_run
    lines = cli("history", str(run_id)).stdout.splitlines()
    # Each transition's row, then what it recorded on lines of its own under it.
    (fail,) = [i for i, line in enumerate(lines) if line.endswith(" fail") and "report" in line]
    assert lines[fail + 1].strip() == "KeyError: 'clean'"
    assert lines[fail + 2].strip().startswith("at test_cli_failures.py:")
    assert "in pick_column" in lines[fail + 2]
    (succeed,) = [
        i for i, line in enumerate(lines) if line.endswith(" succeed") and "count" in line
    ]
    assert lines[succeed + 1].strip().startswith('result {"rows": 8')


def test_why_shows_the_frames_of_each_failed_attempt(
    failed_run: tuple[InProcess, UUID, list[logging.LogRecord]],
) -> None:
    cli, run_id, _ = failed_run
    out = cli("why", f"{run_id}/report").stdout
    assert "KeyError: 'clean'" in out
    assert "at test_cli_failures.py:" in out
    assert "in pick_column" in out
    assert 'result {"rows": 8' in cli("why", f"{run_id}/count").stdout
