"""Routing with real processes on PostgreSQL and RabbitMQ: `flowforge run` with a
broker, beside another program's run that no process here can run, leaves that run
alone; `why` says no worker consumes its type's queue; a worker for it runs it.

The situation a user met: a scheduler and a publisher serving the deployment, a run of
type `divine` waiting, and `flowforge run` of another workflow. Before routing, the
runner's workers took the `divine` dispatch and failed it twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helpers
from tests.e2e.test_cli import EXAMPLE, Cli
from tests.e2e.test_cli_scope import OTHER_MODULE


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_run_with_a_broker_leaves_another_programs_run_alone_until_its_worker_comes(
    production: Cli,
    tmp_path: Path,
) -> None:
    cli = production
    (cli.cwd / "other_tasks.py").write_text(OTHER_MODULE)
    assert cli("db", "init").returncode == 0
    other = cli("submit", "other_tasks:WORKFLOW")
    assert other.returncode == 0, other.stderr
    other_id = other.stdout.strip()
    processes = {
        name: cli.popen(name, log=tmp_path / f"{name}.log") for name in ("scheduler", "publisher")
    }
    try:
        done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=4", timeout=120)
        assert done.returncode == 0, done.stderr
        # No claim, no failure: the divine task waits, ready, in its own queue.
        transitions = [e["transition"] for e in cli.json("history", other_id)]
        assert "claim" not in transitions and "fail" not in transitions, transitions
        (task,) = cli.json("status", other_id)["tasks"]
        assert (task["state"], task["error"]) == ("ready", None)
        why = cli("why", f"{other_id}/divine")
        queue = f"{cli.env['FLOWFORGE_DISPATCH_QUEUE']}.divine"
        assert f"no worker is consuming queue {queue} for type divine" in why.stdout, why

        processes["worker"] = cli.popen(
            "worker",
            "--tasks",
            "other_tasks",
            "--types",
            "divine",
            "--worker-id",
            "seer",
            log=tmp_path / "w.log",
        )
        watched = cli("status", other_id, "--watch", "--json", timeout=90)
        assert watched.returncode == 0, watched.stderr
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)
    claims = [
        (e["actor"], e["attempt"])
        for e in cli.json("history", other_id)
        if e["transition"] == "claim"
    ]
    assert claims == [("seer", 1)]


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_a_worker_refuses_a_type_it_has_no_handler_for(
    production: Cli,
) -> None:
    cli = production
    assert cli("db", "init").returncode == 0
    done = cli("worker", "--tasks", "examples.tasks", "--types", "train", "--types", "extract")
    assert done.returncode == 2, done.stderr
    assert "no handler is registered for task type(s) train" in done.stderr


TWO_TYPES_MODULE = """
from flowforge import task

AUGURY = {"name": "augury", "tasks": [{"key": "divine", "type": "divine"}]}
COUNT = {"name": "count", "tasks": [{"key": "tally", "type": "tally"}]}


@task("divine")
def divine(ctx):
    return "foreseen"


@task("tally")
def tally(ctx):
    return 42
"""


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_a_worker_given_types_consumes_only_their_queues(production: Cli, tmp_path: Path) -> None:
    """`worker --types tally` with handlers for two types: it runs `tally`'s run and
    consumes nothing of `divine`'s queue, whose task waits, ready, unclaimed."""
    cli = production
    (cli.cwd / "two_tasks.py").write_text(TWO_TYPES_MODULE)
    assert cli("db", "init").returncode == 0
    left, ran = (cli("submit", f"two_tasks:{name}").stdout.strip() for name in ("AUGURY", "COUNT"))
    processes = {
        name: cli.popen(name, log=tmp_path / f"{name}.log") for name in ("scheduler", "publisher")
    }
    processes["worker"] = cli.popen(
        "worker",
        "--tasks",
        "two_tasks",
        "--types",
        "tally",
        "--worker-id",
        "counter",
        log=tmp_path / "worker.log",
    )
    try:
        watched = cli("status", ran, "--watch", "--json", timeout=90)
        assert watched.returncode == 0, watched.stderr
        # The worker is up and consuming: still no consumer on divine's queue.
        why = cli("why", f"{left}/divine")
        queue = f"{cli.env['FLOWFORGE_DISPATCH_QUEUE']}.divine"
        assert f"no worker is consuming queue {queue} for type divine" in why.stdout, why
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)
    transitions = [e["transition"] for e in cli.json("history", left)]
    assert "claim" not in transitions, transitions
    (task,) = cli.json("status", left)["tasks"]
    assert (task["state"], task["attempt"]) == ("ready", 1)
