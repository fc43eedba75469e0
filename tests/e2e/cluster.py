"""A FlowForge deployment of real OS processes, for the end-to-end tests.

Each cluster has its own PostgreSQL database and its own RabbitMQ exchange and queues,
and runs `python -m flowforge scheduler|publisher|worker` exactly as production does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg

from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.results import WorkflowRunView
from flowforge.app.service import FlowForge
from tests import servers, topology
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


#: The shared PostgreSQL server, as ``host:port`` for a URL (several for a standby pair).
SHARED_POSTGRES = f"{servers.POSTGRES_HOST}:{servers.POSTGRES_PORT}"


class Cluster:
    """A deployment on the shared servers, or on the ``postgres`` hosts (``h1:p1,h2:p2``,
    with ``query`` such as ``target_session_attrs=read-write``) and ``broker_url`` given."""

    def __init__(
        self,
        tmp: Path,
        *,
        postgres: str = SHARED_POSTGRES,
        query: str = "",
        admin_db: str = servers.POSTGRES_ADMIN_DB,
        broker_url: str = servers.RABBITMQ_URL,
    ) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.dbname = f"flowforge_e2e_{suffix}"
        self.postgres = postgres
        tail = f"?{query}" if query else ""
        self.database_url = f"postgresql://{servers.POSTGRES_USER}@{postgres}/{self.dbname}{tail}"
        self.admin_url = f"postgresql://{servers.POSTGRES_USER}@{postgres}/{admin_db}{tail}"
        self.broker = topology.unique_broker_config("ff-e2e", broker_url)
        self.side_effects = tmp / "side_effects.jsonl"
        self.side_effects.touch()
        self.logs = tmp
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        with admin(self.admin_url) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.app = FlowForge(self.database_url, migrate=True)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "FLOWFORGE_DATABASE_URL": self.database_url,
            **topology.broker_environment(self.broker),
            "FLOWFORGE_TEST_SIDE_EFFECTS": str(self.side_effects),
            "PYTHONPATH": str(ROOT),
        }

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        # The child keeps its own descriptor of the log; ours is closed at once.
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "flowforge", *args],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes[name] = process
        return process

    def start_all(self, workers: int = 2, batch: int = 1) -> None:
        self.start("scheduler", "scheduler", "--interval", "0.2")
        self.start("publisher", "publisher", "--interval", "0.1")
        for number in range(1, workers + 1):
            self.start_worker(f"worker-{number}", batch)

    def start_worker(self, name: str, batch: int = 1) -> subprocess.Popen[bytes]:
        return self.start(
            name,
            "worker",
            "--tasks",
            "tests.e2e.fault_tasks",
            "--worker-id",
            name,
            "--batch",
            str(batch),
        )

    def submit(self, definition: dict[str, Any]) -> UUID:
        return self.app.start_workflow_run(definition)

    def wait_for_run(self, run_id: UUID, timeout: float = 60) -> WorkflowRunView:
        try:
            return wait_until(lambda: _terminal(self.app.get_workflow_run(run_id)), timeout, "")
        except AssertionError:
            states = [(t.task_key, t.state, t.fencing_token) for t in self.app.task_runs(run_id)]
            raise AssertionError(
                f"run {run_id} did not finish in {timeout} s: tasks {states}\n{self.log_tails()}"
            ) from None

    def log_tails(self, lines: int = 15) -> str:
        """The end of every process's log, for a failure message."""
        tails = []
        for name in self.processes:
            text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
            tails.append(f"--- {name} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(tails)

    def effects(self) -> list[dict[str, Any]]:
        lines = self.side_effects.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def release(self) -> None:
        Path(f"{self.side_effects}.release").touch()

    def stop_all(self) -> dict[str, int]:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        codes = {}
        for name, process in self.processes.items():
            try:
                codes[name] = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait()
        return codes

    def close(self) -> None:
        self.stop_all()
        self.app.close()
        with admin(self.admin_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        topology.delete_topology(self.broker)


def chains(count: int, length: int, *, lease_seconds: float = 3) -> dict[str, Any]:
    """``count`` independent chains of ``length`` "steady" tasks: new dispatches keep
    being published while the run lasts, so a fault mid-run meets every process busy."""
    return {
        "name": f"chains_{count}x{length}",
        "lease_seconds": lease_seconds,
        "retry": {"max_attempts": 5, "backoff_seconds": 0.1},
        "tasks": [
            {
                "key": f"c{chain}_{step}",
                "type": "steady",
                **({"depends_on": [f"c{chain}_{step - 1}"]} if step else {}),
            }
            for chain in range(count)
            for step in range(length)
        ],
    }


def ran(cluster: Cluster) -> list[dict[str, Any]]:
    """The side effects of handlers that ran to the end."""
    return [e for e in cluster.effects() if e["event"] == "ran"]


def log_sizes(cluster: Cluster) -> dict[str, int]:
    """Each process's log size now: what it logs later starts at this offset."""
    return {name: (cluster.logs / f"{name}.log").stat().st_size for name in cluster.processes}


def logged_since(cluster: Cluster, sizes: dict[str, int], name: str) -> str:
    with (cluster.logs / f"{name}.log").open("rb") as log:
        log.seek(sizes.get(name, 0))
        return log.read().decode(errors="replace")


def _terminal(run: WorkflowRunView) -> WorkflowRunView | None:
    return run if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state) else None


@contextmanager
def admin(url: str | None = None) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the admin database (of the shared server unless ``url``)."""
    url = url or (
        f"postgresql://{servers.POSTGRES_USER}@{SHARED_POSTGRES}/{servers.POSTGRES_ADMIN_DB}"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn
