"""High availability on PostgreSQL: losing the primary, promoting its synchronous standby.

The pair (tests/e2e/postgres_pair.py) is created once for the module and dropped in a
``finally``. Every process, and the test's own application service, is given both
hosts in one URL with ``target_session_attrs=read-write``; nobody is told about the
failover. See docs/deployment.md for what this proves.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from flowforge import errors
from flowforge.app.results import WorkflowRunView
from flowforge.app.service import FlowForge
from tests import servers
from tests.e2e import postgres_pair
from tests.e2e.cluster import (
    ROOT,
    Cluster,
    chains,
    log_sizes,
    logged_since,
    ran,
)
from tests.e2e.postgres_pair import PostgresPair
from tests.helpers import wait_until

pytestmark = pytest.mark.serial

CHAINS, LENGTH = 3, 8
READ_WRITE = "target_session_attrs=read-write"
#: A ``key=value`` field of a structured log line (flowforge/cli/logs.py).
_FIELD = re.compile(r"(\w+)=(\S+)")


@pytest.fixture(scope="module")
def pair() -> Iterator[PostgresPair]:
    servers.require_postgres()
    if shutil.which("pg_createcluster") is None or os.geteuid() != 0:
        message = "a PostgreSQL standby pair needs pg_createcluster and root"
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{message}, and REQUIRE_POSTGRES=1 is set")
        pytest.skip(message)
    postgres_pair.remove_leftovers()
    pair = PostgresPair()
    try:
        pair.start()
        yield pair
    finally:
        pair.destroy()


@pytest.fixture
def cluster(tmp_path: Path, pair: PostgresPair) -> Iterator[Cluster]:
    servers.require_rabbitmq()
    cluster = Cluster(tmp_path, postgres=pair.hosts, query=READ_WRITE, admin_db="postgres")
    try:
        yield cluster
    finally:
        cluster.close()


def test_losing_the_primary_mid_run_and_promoting_the_standby_loses_no_committed_transition(
    pair: PostgresPair, cluster: Cluster
) -> None:
    cluster.start_all(workers=2)
    run_id = cluster.submit(chains(CHAINS, LENGTH))
    wait_until(lambda: len(ran(cluster)) >= CHAINS, 60, "no task ran on the primary")
    seen = _transitions(cluster.app, run_id)  # committed: read back from the primary
    sizes = log_sizes(cluster)

    pair.stop_primary_hard()
    pair.promote_standby()

    run = _wait_through_failover(cluster, run_id)
    assert run.state == "succeeded", cluster.log_tails()
    assert _serving_port(cluster) == pair.ports[pair.standby]
    after = _transitions(cluster.app, run_id)
    assert seen <= after, f"lost in the failover: {sorted(seen - after)}"
    succeeded = {(task_id, token) for task_id, _, name, token in after if name == "succeed"}
    for task_id, token in _finishes_workers_saw_committed(cluster):
        assert (task_id, token) in succeeded, f"a committed finish was lost: {task_id}"
    for task in cluster.app.task_runs(run_id):
        names = [e.transition for e in cluster.app.history(task.id)]
        assert names.count("succeed") == 1, (task.task_key, names)
    alive = {name: p.poll() for name, p in cluster.processes.items()}
    assert set(alive.values()) == {None}, f"a process exited: {alive}\n{cluster.log_tails()}"
    # The chains' later steps were promoted, published and run after the promotion: the
    # scheduler and the publisher worked on the new primary; so did each worker.
    for name in ("worker-1", "worker-2"):
        assert "task finished" in logged_since(cluster, sizes, name), f"{name} idle after"

    assert set(cluster.stop_all().values()) == {0}
    rebuild = _flowforge(cluster, "db", "rebuild")
    assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
    assert "all match" in rebuild.stdout


def _transitions(app: FlowForge, run_id: UUID) -> set[tuple[UUID, int, str, int | None]]:
    """(aggregate, version, transition, fencing token) of every event of the run."""
    return {
        (e.aggregate_id, e.version, e.transition, e.fencing_token) for e in app.run_history(run_id)
    }


def _wait_through_failover(cluster: Cluster, run_id: UUID) -> WorkflowRunView:
    def probe() -> WorkflowRunView | None:
        try:
            run = cluster.app.get_workflow_run(run_id)
        except errors.DatabaseUnavailableError:
            return None  # the test's own pool finds the new primary like the processes
        return run if run.state in ("succeeded", "failed", "cancelled") else None

    try:
        return wait_until(probe, 120, "")
    except AssertionError:
        pytest.fail(f"run {run_id} did not finish after the failover\n{cluster.log_tails(25)}")


def _serving_port(cluster: Cluster) -> int:
    """The port of the server a read-write connection to the run's database reaches."""
    with psycopg.connect(cluster.database_url) as conn:
        row = conn.execute("SELECT inet_server_port()").fetchone()
    assert row is not None
    return int(row[0])


def _finishes_workers_saw_committed(cluster: Cluster) -> set[tuple[UUID, int]]:
    """(task run, token) of every "task finished" line: logged after the commit returned."""
    finishes = set()
    for name in cluster.processes:
        if name.startswith("worker"):
            text = (cluster.logs / f"{name}.log").read_text(errors="replace")
            for line in text.splitlines():
                if " task finished " in line:
                    fields = dict(_FIELD.findall(line))
                    finishes.add((UUID(fields["task_run_id"]), int(fields["fencing_token"])))
    assert finishes, "the workers logged no finished task"
    return finishes


def _flowforge(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowforge", *args],
        env=cluster.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
