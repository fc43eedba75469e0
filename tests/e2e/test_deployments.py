"""Two deployments (two databases) on one RabbitMQ never take each other's tasks: each
database has its own dispatch topology by default, named after the deployment id that
`flowforge db init` stores. Real processes, the real broker."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from flowforge.config import BrokerConfig
from tests import helpers, servers, topology
from tests.e2e.test_cli import EXAMPLE, Cli, clean_environment

pytestmark = [pytest.mark.postgres, pytest.mark.rabbitmq]


class Deployment:
    """One database, the default topology (no FLOWFORGE_DISPATCH_* set), its CLI."""

    def __init__(self, tmp: Path, label: str) -> None:
        self.dbname = f"flowforge_dep_{label}_{uuid.uuid4().hex[:8]}"
        self.cwd = tmp / label
        self.cwd.mkdir()
        env = clean_environment(
            FLOWFORGE_DATABASE_URL=servers.postgres_url(self.dbname),
            FLOWFORGE_BROKER_URL=servers.RABBITMQ_URL,
        )
        self.cli = Cli(self.cwd, env)
        self.id = ""

    def init(self) -> None:
        servers.admin(f'CREATE DATABASE "{self.dbname}"')
        done = self.cli("db", "init")
        assert done.returncode == 0, done.stderr
        found = re.search(r"deployment ([0-9a-f]{12})", done.stdout)
        assert found, done.stdout
        self.id = found[1]
        assert f"dispatch queues flowforge.{self.id}.tasks.<type>" in done.stdout

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        return self.cli.popen(*args, log=self.cwd / f"{name}.log")

    def log(self, name: str) -> str:
        return (self.cwd / f"{name}.log").read_text()

    def remove(self) -> None:
        servers.admin(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        if self.id:
            topology.delete_topology(
                BrokerConfig(url=servers.RABBITMQ_URL).for_deployment(self.id)
            )


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Deployment, Deployment]]:
    servers.require_postgres()
    servers.require_rabbitmq()
    a, b = Deployment(tmp_path, "a"), Deployment(tmp_path, "b")
    try:
        a.init()
        b.init()
        yield a, b
    finally:
        a.remove()
        b.remove()


def dead_letters(deployment: Deployment) -> int:
    config = BrokerConfig(url=servers.RABBITMQ_URL).for_deployment(deployment.id)
    connection = pika.BlockingConnection(pika.URLParameters(config.url))
    try:
        declared = connection.channel().queue_declare(config.dead_letter_queue, passive=True)
        count = declared.method.message_count
        assert count is not None
        return count
    finally:
        connection.close()


def test_two_deployments_on_one_broker_run_only_their_own_tasks(
    two: tuple[Deployment, Deployment],
) -> None:
    a, b = two
    assert a.id != b.id
    worker = ["worker", "--tasks", "examples.tasks", "--worker-id"]
    processes = {
        "a-worker": a.start("a-worker", *worker, "a-worker"),
        "b-scheduler": b.start("b-scheduler", "scheduler", "--interval", "0.2"),
        "b-publisher": b.start("b-publisher", "publisher", "--interval", "0.1"),
        "b-worker": b.start("b-worker", *worker, "b-worker"),
    }
    try:
        run_id = b.cli.json("submit", EXAMPLE, "--input", "rows=4")["run_id"]
        watched = b.cli("status", run_id, "--watch", "--json", timeout=120)
        logs = {name: (a if name[0] == "a" else b).log(name) for name in processes}
        assert watched.returncode == 0, (watched.stderr, logs)
        assert json.loads(watched.stdout)["state"] == "succeeded"
    finally:
        codes = helpers.stop_all(processes, timeout=30)
    assert codes == dict.fromkeys(processes, 0)
    # B's run was run by B's worker alone; A's worker never saw one of its dispatches.
    entries = b.cli.json("history", run_id)
    assert {e["actor"] for e in entries if e["transition"] == "claim"} == {"b-worker"}
    a_log = a.log("a-worker")
    assert "a-worker" in a_log and "worker started" in a_log
    assert not {e["aggregate_id"] for e in entries} & set(re.findall(r"[0-9a-f-]{36}", a_log))
    assert "dead-lettered" not in a_log
    assert dead_letters(a) == dead_letters(b) == 0
