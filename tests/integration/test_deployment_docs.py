"""docs/deployment.md's checks run as written against the real servers: its monitoring
queries on a FlowForge database (PostgreSQL), and its RabbitMQ checks (`rabbitmqctl`,
`rabbitmq-queues`) with VHOST, DEPLOYMENT and TYPE filled in with a deployment's own
queue on the shared broker. The commands that build a cluster or a standby are those
`tests/e2e/rabbitmq_cluster.py` and `tests/e2e/postgres_pair.py` run against servers of
their own (tests/e2e/test_ha_rabbitmq.py, tests/e2e/test_ha_postgres.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import psycopg
import pytest

from flowforge.app.service import FlowForge
from flowforge.config import BrokerConfig
from flowforge.processes.rabbitmq import topology as rabbit_topology
from tests import servers, topology
from tests.helpers import RABBITMQCTL_TIMEOUT_S

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
#: The RabbitMQ tools whose read-only checks the page shows.
CHECKS = ("rabbitmqctl list_queues", "rabbitmqctl cluster_status", "rabbitmq-queues quorum_status")


def blocks(language: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def rabbitmq_checks() -> list[str]:
    return [
        line.strip()
        for block in blocks("sh")
        for line in block.splitlines()
        if line.strip().startswith(CHECKS)
    ]


def test_the_page_shows_its_checks() -> None:
    assert len(rabbitmq_checks()) >= 4
    assert len(blocks("sql")) >= 3


def test_the_monitoring_queries_run_on_a_flowforge_database(
    pg_app: FlowForge, postgres_url: str
) -> None:
    pg_app.start_workflow_run({"name": "w", "tasks": [{"key": "a", "type": "a"}]})
    with psycopg.connect(postgres_url) as conn:
        for block in blocks("sql"):
            for statement in filter(str.strip, block.split(";")):
                rows = conn.execute(statement).fetchall()
                assert len(rows) >= 1 or "WHERE state IN" in statement, statement


@pytest.fixture
def deployment_queue() -> Iterator[tuple[BrokerConfig, str]]:
    """A deployment's topology with one task type's quorum queue, on the shared broker."""
    servers.require_rabbitmq()
    config = topology.unique_broker_config("ff-docs")
    connection = pika.BlockingConnection(pika.URLParameters(config.url))
    try:
        channel = connection.channel()
        rabbit_topology.declare_dispatch_queue(channel, config)
        rabbit_topology.declare_task_queue(channel, config, "extract")
    finally:
        connection.close()
    yield config, config.queue_for("extract")
    topology.delete_topology(config, ["extract"])


def test_the_rabbitmq_checks_run_as_written_and_find_the_deployments_queue(
    deployment_queue: tuple[BrokerConfig, str],
) -> None:
    config, queue = deployment_queue
    prefix = config.queue.removesuffix(".tasks")  # flowforge.<deployment>, here the test's
    for line in rabbitmq_checks():
        filled = line.replace("VHOST", "/").replace("flowforge.DEPLOYMENT.tasks.TYPE", queue)
        assert "DEPLOYMENT" not in filled and "TYPE" not in filled, line
        done = subprocess.run(
            shlex.split(filled, comments=True),
            capture_output=True,
            text=True,
            timeout=RABBITMQCTL_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        if "list_queues" in line:
            assert queue in done.stdout and prefix in done.stdout
        if "quorum_status" in line:
            assert "not_found" not in done.stdout + done.stderr
