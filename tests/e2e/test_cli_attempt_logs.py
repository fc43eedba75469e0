"""`flowforge logs RUN TASK` (issue #49): each attempt's output, through the real command,
embedded and with separate worker processes on PostgreSQL and RabbitMQ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import helpers
from tests.e2e.test_cli import EXAMPLE, Cli, make_cli, production_processes


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """The example run to its end with `flowforge run` (its enrich fails once)."""
    cli = make_cli(tmp_path_factory.mktemp("logs"))
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=8")
    assert done.returncode == 0, done.stderr
    (run,) = cli.json("runs")
    return cli, str(run["run_id"])


def test_logs_shows_each_attempts_output_and_only_the_one_asked_for(
    finished: tuple[Cli, str],
) -> None:
    cli, run_id = finished
    done = cli("logs", run_id, "enrich")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" on ")[0] for line in lines[::2]] == [
        "--- attempt 1",
        "--- attempt 2",
    ]
    assert lines[1::2] == ["enriching 8 records, attempt 1", "enriching 8 records, attempt 2"]
    assert all(len(line) <= 80 for line in lines)

    second = cli("logs", f"{run_id[-8:]}/enrich", "--attempt", "2")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1:] == ["enriching 8 records, attempt 2"]

    (one,) = cli.json("logs", run_id, "enrich", "--attempt", "1")
    assert one["attempt"] == 1 and one["truncated"] is False

    quiet = cli("logs", run_id, "load")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.startswith("no output stored for load (succeeded, attempt 1)")

    # The task has ended: --follow prints what there is and exits.
    follow = cli("logs", run_id, "enrich", "--follow", timeout=20)
    assert follow.returncode == 0 and follow.stdout == done.stdout


def test_the_run_prints_no_handler_output_of_its_own(finished: tuple[Cli, str]) -> None:
    cli, run_id = finished
    shown = cli("status", run_id)
    assert "enriching" not in shown.stdout + shown.stderr


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_logs_follow_prints_each_attempt_as_a_worker_process_stores_it(
    production: Cli, tmp_path: Path
) -> None:
    assert production("db", "init").returncode == 0
    run_id: str = production.json("submit", EXAMPLE, "--input", "rows=8")["run_id"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "flowforge", "logs", run_id, "enrich", "--follow"],
        cwd=production.cwd,
        env=production.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes = production_processes(production, tmp_path, workers=("worker-1",))
    try:
        out, err = follow.communicate(timeout=90)
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)
    assert follow.returncode == 0, err
    assert out.splitlines()[1::2] == [
        "enriching 8 records, attempt 1",
        "enriching 8 records, attempt 2",
    ]
    assert "worker-1" in out.splitlines()[0]
    assert "enriching" not in (tmp_path / "worker-1.log").read_text()


def test_status_takes_run_slash_task_and_a_mistyped_key_gets_the_closest(
    finished: tuple[Cli, str],
) -> None:
    cli, run_id = finished
    done = cli("status", f"{run_id[-8:]}/enrich")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("TASK", "enrich"))]
    assert [row.split()[0] for row in rows] == ["TASK", "enrich"]
    assert "tasks: 5 succeeded (5 tasks)" in done.stdout
    (one,) = cli.json("status", f"{run_id}/enrich")["tasks"]
    assert one["task_key"] == "enrich"
    wrong = cli("status", f"{run_id}/enrch")
    assert wrong.returncode == 2
    assert "has no task 'enrch' (did you mean 'enrich'?" in wrong.stderr
