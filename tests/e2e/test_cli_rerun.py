"""`flowforge rerun`, through real subprocesses on the embedded default (SQLite,
in-process dispatch): the example in docs/cli.md as written, a failed run fixed and
rerun, --detach, and the refusals with their exit codes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests.e2e.test_cli import DOC, ROOT, Cli, make_cli, one_line_error

#: A run whose second task fails until a file named ``fixed`` exists in its directory:
#: the user's fix, between the run and its rerun.
FLAKY_MODULE = """
from pathlib import Path

from flowforge import task

WORKFLOW = {
    "name": "flaky",
    "retry": {"max_attempts": 1},
    "tasks": [
        {"key": "first", "type": "first"},
        {"key": "after", "type": "after", "depends_on": ["first"]},
    ],
}


@task("first")
def first(ctx):
    return {"rows": 3, "run": str(ctx.workflow_run_id)}


@task("after")
def after(ctx):
    if not Path("fixed").exists():
        raise ValueError("not fixed yet")
    return {"saw": ctx.upstream["first"]}
"""


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = make_cli(tmp_path)
    done = cli("db", "init")
    assert done.returncode == 0, done.stderr
    return cli


def doc_example() -> tuple[list[list[str]], list[str]]:
    """The rerun section's commands (``sh`` block) and the output it shows."""
    section = DOC.read_text().split("### flowforge rerun RUN", 1)[1].split("\n### ", 1)[0]
    (commands,) = re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    # Fences in pairs: a closing fence followed by an opening one is not a block.
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    (output,) = [body for kind, body in blocks if not kind]
    return [shlex.split(line) for line in commands.splitlines()], output.splitlines()


def test_the_docs_rerun_example_runs_as_written(cli: Cli) -> None:
    (run, rerun), shown = doc_example()
    assert run[0] == rerun[0] == "flowforge"
    done = cli(*[str(ROOT / a) if a.endswith(".toml") else a for a in run[1:]])
    assert done.returncode == 0, done.stderr
    (old,) = cli.json("runs")

    done = cli(*[old["run_id"][:8] if a == "RUN" else a for a in rerun[1:]])

    assert done.returncode == 0, done.stderr
    # The lines the docs show that do not hold ids and times are exactly what it says.
    for line in shown[1:3]:
        assert line in done.stderr.splitlines(), done.stderr
    assert re.search(r"^run \S+ succeeded in ", done.stdout, re.MULTILINE), done.stdout
    # Issue #49: the carried-over tasks ran no attempt here (enrich fails once: 2 + 1).
    assert any(line.endswith(": 5 tasks, 3 attempts, 3 carried over") for line in shown)
    assert done.stdout.rstrip().endswith(": 5 tasks, 3 attempts, 3 carried over"), done.stdout
    new = next(r for r in cli.json("runs") if r["run_id"] != old["run_id"])
    assert new["rerun_of"] == old["run_id"]
    tasks = {t["task_key"]: t for t in cli.json("status", new["run_id"])["tasks"]}
    carried = {k for k, t in tasks.items() if t["carried_from_run_id"] == old["run_id"]}
    assert carried == {"extract", "clean", "score"}
    history = cli.json("history", new["run_id"])
    assert {e["task_key"] for e in history if e["transition"] == "carry_over"} == carried
    claimed = {e["task_key"] for e in history if e["transition"] == "claim"}
    assert claimed == {"enrich", "load"}


def test_a_failed_run_fixed_then_rerun_runs_only_what_failed_and_succeeds(cli: Cli) -> None:
    (cli.cwd / "flaky_tasks.py").write_text(FLAKY_MODULE)
    done = cli("run", "flaky_tasks:WORKFLOW", "--workers", "1")
    assert done.returncode == exits.EXIT_FAILED, done.stderr
    (old,) = cli.json("runs")
    (cli.cwd / "fixed").write_text("")

    done = cli("rerun", old["run_id"][:8], "--tasks", "flaky_tasks", "--workers", "1")

    assert done.returncode == 0, done.stderr
    assert "carried over: first" in done.stderr
    assert "running again: after" in done.stderr
    new = next(r for r in cli.json("runs") if r["run_id"] != old["run_id"])
    assert (new["state"], new["rerun_of"]) == ("succeeded", old["run_id"])
    tasks = {t["task_key"]: t for t in cli.json("status", new["run_id"])["tasks"]}
    # after saw the result first produced in the old run, as it would have there.
    assert tasks["after"]["result"] == {"saw": {"rows": 3, "run": old["run_id"]}}
    assert tasks["first"]["carried_from_attempt"] == 1

    listing = cli("runs").stdout.splitlines()
    link = f"  rerun of {old['run_id']}"
    assert link in listing
    assert len(link) <= 80
    status = cli("status", new["run_id"]).stdout
    assert f"rerun of {old['run_id']}" in status
    assert f"first: from run {old['run_id']}, attempt 1" in status
    history = cli("history", new["run_id"]).stdout
    short = old["run_id"][-8:]
    assert re.search(
        rf"first .* carry_over\n +from run {short} task run \w{{8}} attempt 1", history
    )


def test_detach_creates_the_run_prints_its_id_and_runs_nothing(cli: Cli) -> None:
    (cli.cwd / "flaky_tasks.py").write_text(FLAKY_MODULE)
    assert cli("run", "flaky_tasks:WORKFLOW", "--workers", "1").returncode == 1
    (old,) = cli.json("runs")

    done = cli("rerun", old["run_id"], "--detach")

    assert done.returncode == 0, done.stderr
    new_id = done.stdout.strip()
    status = cli.json("status", new_id)
    assert status["state"] == "pending"
    assert status["rerun_of"] == old["run_id"]
    assert {t["task_key"]: t["state"] for t in status["tasks"]} == {
        "first": "succeeded",
        "after": "ready",
    }
    # Embedded: no worker will come, and it says what will run it.
    assert f"run --resume {new_id}" in done.stderr


def test_refusals_name_the_problem_with_their_exit_codes(cli: Cli) -> None:
    (cli.cwd / "flaky_tasks.py").write_text(FLAKY_MODULE)
    (cli.cwd / "fixed").write_text("")
    assert cli("run", "flaky_tasks:WORKFLOW", "--workers", "1").returncode == 0
    (done_run,) = cli.json("runs")
    run_id = done_run["run_id"]

    unknown = cli("rerun", run_id, "--from", "nope", "--tasks", "flaky_tasks")
    assert unknown.returncode == exits.EXIT_BAD_INPUT
    assert "'nope'" in one_line_error(unknown)
    assert "first, after" in one_line_error(unknown)

    no_handlers = cli("rerun", run_id, "--from", "after")
    assert no_handlers.returncode == exits.EXIT_BAD_INPUT
    assert "'after' (type 'after')" in one_line_error(no_handlers)

    nothing = cli("rerun", run_id, "--tasks", "flaky_tasks")
    assert nothing.returncode == exits.EXIT_REFUSED
    assert "--from" in one_line_error(nothing)

    pending = cli("submit", "flaky_tasks:WORKFLOW").stdout.strip()
    unfinished = cli("rerun", pending, "--detach")
    assert unfinished.returncode == exits.EXIT_REFUSED
    assert "cancel" in one_line_error(unfinished)
    assert len(cli.json("runs")) == 2  # nothing was created by the refusals
