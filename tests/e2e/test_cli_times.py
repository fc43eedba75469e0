"""Times the CLI prints can be pasted back (`why --at`), carry a zone marker, and `why`
names who cancelled a task; on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from flowforge import FlowForge
from flowforge.cli import exits
from tests.e2e.inprocess import InProcess, on_backend

WORKFLOW = {
    "name": "pasted",
    "retry": {"max_attempts": 2},
    "tasks": [
        {"key": "first", "type": "first"},
        {"key": "second", "type": "second", "depends_on": ["first"]},
    ],
}
#: A time as every command prints it: UTC with microseconds and a zone marker.
FULL_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\b")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[FlowForge, InProcess]]:
    cli = on_backend(request, tmp_path, capsys, monkeypatch)
    with FlowForge(cli.database_url) as app:
        yield app, cli


def submitted_run(app: FlowForge) -> tuple[UUID, dict[str, UUID]]:
    run_id = app.start_workflow_run(WORKFLOW)  # pending until its first claim
    return run_id, {t.task_key: t.id for t in app.task_runs(run_id)}


def test_a_time_pasted_from_history_answers_as_of_that_transition(
    backend: tuple[FlowForge, InProcess],
) -> None:
    app, cli = backend
    run_id, tasks = submitted_run(app)
    claim = app.claim_task_run(tasks["first"], "w1", 30)
    assert claim is not None
    failed = {"type": "ValueError", "message": "no"}
    assert app.finish_task_run(tasks["first"], claim.fencing_token, "fail", error=failed)
    done = cli("history", f"{run_id}/first")
    assert done.returncode == 0, done.stderr
    (fail_line,) = [line for line in done.stdout.splitlines() if line.endswith(" fail")]
    pasted = FULL_TIME.search(fail_line)
    assert pasted is not None, fail_line
    answer = cli.json("why", f"{run_id}/first", "--at", pasted.group())
    assert answer["state"] == "failed"
    assert answer["reason"] == "retry_pending"


def test_why_at_an_empty_time_is_an_error_not_now(backend: tuple[FlowForge, InProcess]) -> None:
    app, cli = backend
    run_id, _ = submitted_run(app)
    done = cli("why", f"{run_id}/first", "--at", "")
    assert done.returncode == exits.EXIT_BAD_INPUT
    assert "--at '' is not an ISO 8601 time" in done.stderr


def test_why_names_who_cancelled_a_task_while_its_run_still_runs(
    backend: tuple[FlowForge, InProcess],
) -> None:
    app, cli = backend
    run_id, tasks = submitted_run(app)
    assert app.claim_task_run(tasks["first"], "w1", 30) is not None  # the run starts
    assert app.transition_task_run(tasks["second"], "cancel_pending", actor="alice")
    answer = cli.json("why", f"{run_id}/second")
    assert answer["reason"] == "cancelled"
    assert "by alice, while its run was running" in answer["headline"]
    assert "because its run" not in answer["headline"]


def test_why_says_a_task_was_cancelled_because_its_run_was(
    backend: tuple[FlowForge, InProcess],
) -> None:
    app, cli = backend
    run_id, _ = submitted_run(app)
    app.cancel_workflow_run(run_id, actor="bob")
    answer = cli.json("why", f"{run_id}/second")
    assert "because its run was cancelled by bob" in answer["headline"]


def test_times_of_day_carry_a_zone_marker(backend: tuple[FlowForge, InProcess]) -> None:
    app, cli = backend
    run_id, _ = submitted_run(app)
    app.cancel_workflow_run(run_id)
    done = cli("why", f"{run_id}/second")
    assert re.search(r"cancelled at \d\d:\d\d:\d\dZ", done.stdout), done.stdout
    assert FULL_TIME.search(done.stdout), done.stdout
