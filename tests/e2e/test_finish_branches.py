"""``on_failure = "finish_branches"`` through real subprocesses on the embedded default
(SQLite, in-process dispatch): one branch fails for good while the other is running, and
the other finishes ``succeeded``; then ``why`` of each task (docs/execution-model.md,
"When a task fails for good"). The same workflow without the option: fail-fast, and
``why`` of the cancelled independent task says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests.e2e.test_cli import Cli, make_cli

#: a1 is running when b1 fails: it waits for b1's marker, then outlives b1's failure
#: and the advance after it by a second; b2 depends on b1.
TASKS_MODULE = """
import time
from pathlib import Path

from flowforge import task


@task("a1")
def a1(ctx):
    deadline = time.monotonic() + 30
    while not Path("b1_started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    return {"a1": "done"}


@task("b1")
def b1(ctx):
    Path("b1_started").write_text("")
    raise ValueError("b1 breaks")


@task("b2")
def b2(ctx):
    return {"b2": "never"}
"""

WORKFLOW = """
name = "two_branches"
{option}

[retry]
max_attempts = 1

[[tasks]]
key = "a1"
type = "a1"

[[tasks]]
key = "b1"
type = "b1"

[[tasks]]
key = "b2"
type = "b2"
depends_on = ["b1"]
"""


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = make_cli(tmp_path)
    (tmp_path / "branch_tasks.py").write_text(TASKS_MODULE)
    return cli


def run(cli: Cli, option: str) -> dict[str, dict[str, object]]:
    (cli.cwd / "branches.toml").write_text(WORKFLOW.format(option=option))
    done = cli("run", "branches.toml", "--tasks", "branch_tasks", "--workers", "2", timeout=120)
    assert done.returncode == exits.EXIT_FAILED, (done.stdout, done.stderr)
    (only,) = cli.json("runs")
    assert only["state"] == "failed"
    shown = cli("status", only["run_id"], "--json")
    assert shown.returncode == exits.EXIT_FAILED, shown.stderr  # status of a failed run
    status = json.loads(shown.stdout)
    return {t["task_key"]: {**t, "run_id": only["run_id"]} for t in status["tasks"]}


def test_finish_branches_lets_the_independent_branch_finish_and_why_says_so(cli: Cli) -> None:
    tasks = run(cli, 'on_failure = "finish_branches"')
    assert {k: t["state"] for k, t in tasks.items()} == {
        "a1": "succeeded",
        "b1": "failed",
        "b2": "cancelled",
    }
    run_id = tasks["a1"]["run_id"]
    a1 = cli.json("why", f"{run_id}/a1")
    assert a1["reason"] == "succeeded"
    b2 = cli.json("why", f"{run_id}/b2")
    assert b2["reason"] == "upstream_failed"
    assert "b1, which it depends on, failed for good" in b2["headline"]
    b1 = cli("why", f"{run_id}/b1").stdout
    assert "b1 failed for good" in b1 and "once every branch had ended" in b1


def test_fail_fast_cancels_the_running_branch_and_why_does_not_blame_a_dependency(
    cli: Cli,
) -> None:
    tasks = run(cli, "")
    assert tasks["b1"]["state"] == "failed"
    assert tasks["a1"]["state"] == "cancelled"
    run_id = tasks["a1"]["run_id"]
    a1 = cli.json("why", f"{run_id}/a1")
    assert "when b1 failed for good (fail-fast" in a1["headline"]
    assert "which it depends on" not in a1["headline"]
