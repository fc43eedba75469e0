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
