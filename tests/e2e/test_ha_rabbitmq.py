"""High availability on a three-node RabbitMQ cluster: losing the dispatch queue's leader.

The cluster (tests/e2e/rabbitmq_cluster.py) is started once for the module and torn
down in a ``finally``; FlowForge's processes get every node in FLOWFORGE_BROKER_URL and
run on the shared PostgreSQL. See docs/deployment.md for what this proves.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowforge.processes import rabbitmq
from tests import servers
from tests.e2e import rabbitmq_cluster
from tests.e2e.cluster import Cluster, chains, log_sizes, logged_since, ran
from tests.e2e.rabbitmq_cluster import RabbitCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.serial

CHAINS, LENGTH = 3, 8


@pytest.fixture(scope="module")
def rabbit_cluster() -> Iterator[RabbitCluster]:
    servers.require_rabbitmq()  # the packages and the Erlang cookie are the shared node's
    if shutil.which("rabbitmq-server") is None or os.geteuid() != 0:
        _unavailable("a RabbitMQ cluster needs rabbitmq-server and root (to run as rabbitmq)")
    rabbitmq_cluster.remove_leftovers()
    cluster = RabbitCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def _unavailable(message: str) -> None:
    if os.environ.get("REQUIRE_RABBITMQ") == "1":
        pytest.fail(f"{message}, and REQUIRE_RABBITMQ=1 is set")
    pytest.skip(message)


@pytest.fixture
def cluster(tmp_path: Path, rabbit_cluster: RabbitCluster) -> Iterator[Cluster]:
    servers.require_postgres()
    cluster = Cluster(tmp_path, broker_url=rabbit_cluster.url)
    try:
        yield cluster
    finally:
        cluster.close()


def test_killing_the_dispatch_queues_leader_mid_run_loses_no_task_and_finishes_none_twice(
    rabbit_cluster: RabbitCluster, cluster: Cluster
) -> None:
    # Declared up front (as a worker would) so that its leader is known before the run.
    connection = rabbitmq.connect(cluster.broker, name="test")
    try:
        rabbitmq.declare_dispatch_queue(connection.channel(), cluster.broker, ["steady"])
    finally:
        connection.close()
    survivor = rabbit_cluster.nodes[-1]
    leader, members = rabbit_cluster.queue(survivor, cluster.broker.queue_for("steady"))
    assert members == sorted(node.name for node in rabbit_cluster.nodes), "not on all three"

    cluster.start_all(workers=2)
    run_id = cluster.submit(chains(CHAINS, LENGTH))
    wait_until(lambda: len(ran(cluster)) >= CHAINS, 60, "no task ran on the cluster")
    sizes = log_sizes(cluster)
    rabbit_cluster.kill(rabbit_cluster.node(leader))
    assert cluster.app.get_workflow_run(run_id).state == "running", "killed too late"

    assert cluster.wait_for_run(run_id, timeout=120).state == "succeeded"
    new_leader, _ = rabbit_cluster.queue(survivor, cluster.broker.queue_for("steady"))
    assert new_leader != leader
    tasks = cluster.app.task_runs(run_id)
    assert len(tasks) == CHAINS * LENGTH
    for task in tasks:
        history = cluster.app.history(task.id)
        assert [e.transition for e in history].count("succeed") == 1, task.task_key
        claimed = {e.fencing_token for e in history if e.transition == "claim"}
        dispatches = cluster.app.dispatches_of(task.id)
        # One dispatch per token: nothing was re-dispatched as stalled (the safety net
        # for a confirmed dispatch the broker lost), and every dispatch the broker
        # confirmed was delivered and claimed (a claim moves the token one past it).
        tokens = [d.fencing_token for d in dispatches]
        assert len(tokens) == len(set(tokens)), f"{task.task_key} re-dispatched: {tokens}"
        for dispatch in dispatches:
            assert dispatch.published_at is not None
            assert dispatch.fencing_token + 1 in claimed, f"{task.task_key}: lost {dispatch}"
    alive = {name: p.poll() for name, p in cluster.processes.items()}
    assert set(alive.values()) == {None}, f"a process exited: {alive}\n{cluster.log_tails()}"
    if leader == rabbit_cluster.nodes[0].name:
        # Every process connected to the first node of the URL: all had to fail over.
        for name in ("publisher", "worker-1", "worker-2"):
            assert "broker connected" in logged_since(cluster, sizes, name), name
