"""A broker that refuses the credentials (issue #49): `submit`, `run` and `make demo`'s
main job fail within seconds with the broker's own reason and leave no run behind; a
broker that is only unreachable does not stop a `submit` (its outbox keeps the
dispatches), and says so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import servers
from tests.e2e.test_cli import EXAMPLE, ROOT, Cli, make_cli

#: What "within seconds" means on a loaded CI machine, Python's start-up included.
FAST_S = 20.0


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    made = make_cli(tmp_path)
    assert made("db", "init").returncode == 0
    return made


def wrong_password() -> str:
    return servers.RABBITMQ_URL.replace("guest:guest@", "guest:not-the-password@")


@pytest.mark.rabbitmq
@pytest.mark.parametrize("command", ["submit", "run"])
def test_a_broker_refusing_the_credentials_fails_the_command_and_leaves_no_run(
    cli: Cli, command: str
) -> None:
    servers.require_rabbitmq()
    extra = ["--tasks", "examples.tasks"] if command == "run" else []
    began = time.monotonic()
    done = cli(command, EXAMPLE, *extra, "--broker-url", wrong_password(), timeout=FAST_S * 3)
    assert time.monotonic() - began < FAST_S
    assert done.returncode == 3, done.stderr
    assert "ACCESS_REFUSED" in done.stderr
    assert "Check the user name and password in --broker-url" in done.stderr
    assert "not-the-password" not in done.stderr
    assert cli.json("runs") == []


@pytest.mark.rabbitmq
def test_a_submit_while_the_broker_is_unreachable_keeps_its_run_and_says_why(cli: Cli) -> None:
    done = cli("submit", EXAMPLE, "--broker-url", "amqp://guest:guest@127.0.0.1:1/%2F")
    assert done.returncode == 0, done.stderr
    assert "note: the run's dispatches wait in the outbox until the broker is back" in done.stderr
    assert len(cli.json("runs")) == 1


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_make_demo_with_a_wrong_broker_password_fails_at_once_with_no_run(
    production: Cli,
) -> None:
    assert production("db", "init").returncode == 0
    env = {**production.env, "FLOWFORGE_BROKER_URL": wrong_password()}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "examples.main_job"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=FAST_S * 3,
        check=False,
    )
    assert time.monotonic() - began < FAST_S
    assert done.returncode == 3, done.stdout + done.stderr
    assert "ACCESS_REFUSED" in done.stderr
    assert production.json("runs") == []
