"""An embedded `flowforge run` runs only the runs it has handlers for, and leaves the
others in its database alone; without a broker, `submit` and `why` say what will run a
run. On SQLite and on PostgreSQL (embedded mode works on both)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_cli import EXAMPLE, Cli

#: A workflow whose task type only this module has a handler for.
OTHER_MODULE = """
from flowforge import task

WORKFLOW = {"name": "other", "tasks": [{"key": "divine", "type": "divine"}]}


@task("divine")
def divine(ctx):
    return "foreseen"
"""


@pytest.fixture
def embedded(embedded_cli: Cli) -> Cli:
    (embedded_cli.cwd / "other_tasks.py").write_text(OTHER_MODULE)
    return embedded_cli


def test_an_embedded_run_leaves_a_run_it_has_no_handlers_for_alone(embedded: Cli) -> None:
    cli = embedded
    other = cli("submit", "other_tasks:WORKFLOW")
    assert other.returncode == 0, other.stderr
    other_id = other.stdout.strip()
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=4")
    assert done.returncode == 0, done.stderr
    # Not started, claimed or failed: only its creation is in its audit log.
    transitions = [e["transition"] for e in cli.json("history", other_id)]
    assert set(transitions) == {"create"}, transitions
    status = cli.json("status", other_id)
    assert status["state"] == "pending"
    assert [(t["state"], t["attempt"], t["error"]) for t in status["tasks"]] == [
        ("ready", 1, None)
    ]
    # A runner with its handlers runs it, and runs only it.
    resumed = cli("run", "--resume", other_id, "--tasks", "other_tasks")
    assert resumed.returncode == 0, resumed.stderr
    assert cli.json("status", other_id)["tasks"][0]["result"] == "foreseen"
    states = sorted(run["state"] for run in cli.json("runs"))
    assert states == ["succeeded", "succeeded"]


def test_without_a_broker_submit_and_why_name_what_will_run_the_run(embedded: Cli) -> None:
    cli = embedded
    submitted = cli("submit", "other_tasks:WORKFLOW")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    resume = f"flowforge run --resume {run_id} --tasks MODULE"
    assert "no broker is configured" in submitted.stderr
    assert resume in submitted.stderr and "divine" in submitted.stderr
    why = cli.json("why", f"{run_id}/divine")
    advice = " ".join(why["details"])
    assert resume in advice
    assert "flowforge publisher" not in advice and "flowforge scheduler" not in advice


def test_run_resume_refuses_a_run_it_has_no_handlers_for(embedded: Cli) -> None:
    cli = embedded
    run_id = cli("submit", "other_tasks:WORKFLOW").stdout.strip()
    done = cli("run", "--resume", run_id[:8], "--tasks", "examples.tasks")
    assert done.returncode == 2
    assert "'divine' (type 'divine')" in done.stderr
    assert json.loads(cli("status", run_id, "--json").stdout)["state"] == "pending"


#: Another workflow with the example's handlers (``examples.tasks``), as in the user's
#: report: its older run waits in the database when `flowforge run` starts.
OLDER_WORKFLOW = """\
name = "older"

[[tasks]]
key = "extract"
type = "extract"
"""


def test_run_runs_only_its_own_run_beside_an_older_run_with_the_same_handlers(
    embedded: Cli,
) -> None:
    cli = embedded
    (cli.cwd / "older.toml").write_text(OLDER_WORKFLOW)
    older = cli("submit", "older.toml", "--input", "rows=3")
    assert older.returncode == 0, older.stderr
    older_id = older.stdout.strip()
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=4")
    assert done.returncode == 0, done.stderr
    # Left exactly as it was: only its creation in its audit log, no attempt.
    assert {e["transition"] for e in cli.json("history", older_id)} == {"create"}
    status = cli.json("status", older_id)
    assert status["state"] == "pending"
    assert [(t["state"], t["attempt"]) for t in status["tasks"]] == [("ready", 1)]


def test_run_all_also_runs_the_older_runs_it_has_the_handlers_for(embedded: Cli) -> None:
    cli = embedded
    (cli.cwd / "older.toml").write_text(OLDER_WORKFLOW)
    older_id = cli("submit", "older.toml", "--input", "rows=3").stdout.strip()
    # One worker: the older dispatch, first in the outbox and so first on the in-process
    # queue, is taken before any of this run's, so it has run before this run can end.
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--all", "--workers", "1")
    assert done.returncode == 0, done.stderr
    status = cli.json("status", older_id)
    assert [(t["state"], t["result"]) for t in status["tasks"]] == [
        ("succeeded", {"records": [0, 1, 2]})
    ]


#: A task whose first attempt fails, then waits 3 s for its retry: a still run.
BACKOFF_MODULE = """
from flowforge import task

WORKFLOW = {
    "name": "patient",
    "retry": {"max_attempts": 2, "backoff_seconds": 3, "jitter": 0.0},
    "tasks": [{"key": "flaky", "type": "flaky"}],
}


@task("flaky")
def flaky(ctx):
    if ctx.attempt == 1:
        raise ConnectionError("the service is not up yet")
    return "up"
"""


def test_run_says_what_a_still_run_waits_for(embedded: Cli) -> None:
    cli = embedded
    (cli.cwd / "patient_tasks.py").write_text(BACKOFF_MODULE)
    done = cli("run", "patient_tasks:WORKFLOW")
    assert done.returncode == 0, done.stderr
    waits = [line for line in done.stdout.splitlines() if " waiting: " in line]
    # Once, though the poll saw the same wait many times (a pipe gets each change once).
    assert len(waits) == 1, done.stdout
    assert (
        "waiting: flaky is in retry backoff: attempt 1 failed (ConnectionError: the " in (waits[0])
    )
    assert "attempt 2 of 2 is due at " in waits[0]
