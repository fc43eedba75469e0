"""The main job: a real workflow end to end on PostgreSQL and RabbitMQ.

Starts the scheduler, the publisher and two workers as separate OS processes (the same
`flowforge` commands production runs), submits examples/fan_out.toml, waits for the run
to finish, and prints each task's final state and attempts from the audit log.

    python -m examples.main_job

Configuration: FLOWFORGE_DATABASE_URL (default: postgresql://postgres@127.0.0.1:5432/
flowforge_demo, created if missing) and FLOWFORGE_BROKER_URL (default: the local
RabbitMQ as guest). On a machine with neither server reachable, it says so and runs the
same workflow on the embedded default instead (`flowforge demo`: SQLite and an
in-process dispatch channel, the same scheduler, publisher and worker code).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit
from uuid import UUID

import psycopg

from flowforge import config, errors
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app.results import WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.cli import common, render

DATABASE_URL = os.environ.get(
    "FLOWFORGE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/flowforge_demo"
)
BROKER_URL = os.environ.get("FLOWFORGE_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
WORKFLOW = Path(__file__).with_name("fan_out.toml")
TIMEOUT_S = 120.0
#: The report's width: a terminal's 80 columns.
REPORT_WIDTH = 80
#: The settings the embedded fallback must not inherit: they are the unreachable ones.
EMBEDDED_UNSET = (config.DATABASE_URL_VARIABLE, config.BrokerConfig.ENVIRONMENT["url"])


def ensure_database(url: str) -> None:
    """Create the demo database if it does not exist (the admin db is `postgres`)."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = url.replace(f"/{name}", "/postgres", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not found:
            conn.execute(f'CREATE DATABASE "{name}"')


def start(*command: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FLOWFORGE_DATABASE_URL": DATABASE_URL,
        "FLOWFORGE_BROKER_URL": BROKER_URL,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "flowforge", "--log-level", "WARNING", *command], env=env
    )


def redacted(url: str) -> str:
    """The URL without its password, for printing."""
    parts = urlsplit(url)
    return url.replace(f":{parts.password}@", ":***@", 1) if parts.password else url


def servers_reachable() -> bool:
    for url, default_port in ((DATABASE_URL, 5432), (BROKER_URL, 5672)):
        parts = urlsplit(url)
        address = (parts.hostname or "127.0.0.1", parts.port or default_port)
        try:
            socket.create_connection(address, timeout=2).close()
        except OSError:
            print(f"{address[0]}:{address[1]} is not reachable ({parts.scheme})")
            return False
    return True


def main() -> int:
    print(f"database: {redacted(DATABASE_URL)}")
    print(f"broker:   {redacted(BROKER_URL)}")
    if not servers_reachable():
        return embedded_demo()
    try:
        ensure_database(DATABASE_URL)
    except psycopg.OperationalError as exc:
        print(f"the database is not usable ({str(exc).strip().splitlines()[0]})")
        return embedded_demo()
    if (refused := broker_refusal()) is not None:
        print(f"error: {refused}", file=sys.stderr)
        return 3
    app = FlowForge(DATABASE_URL, migrate=True)  # a fresh database gets its schema
    run_id = app.start_workflow_run(str(WORKFLOW), {"rows": 8})
    print(f"submitted run {run_id} of {WORKFLOW.name}")
    processes = [
        start("scheduler", "--interval", "0.2"),
        start("publisher", "--interval", "0.1"),
        start("worker", "--tasks", "examples.tasks", "--worker-id", "worker-1"),
        start("worker", "--tasks", "examples.tasks", "--worker-id", "worker-2"),
    ]
    try:
        run = wait_for_run(app, run_id)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
    report(app, run_id)
    print(f"run {run_id}: {run.state}")
    app.close()
    print("\ninspect it:")
    for line in render.inspect_commands(run_id, flowforge_command(), "enrich"):
        print(f"  {line}")
    return 0 if run.state == "succeeded" else 1


def broker_refusal() -> str | None:
    """Why the broker will not have us (its own words: credentials, vhost), checked
    before the run exists: the workers would retry for ever and the run wait."""
    from flowforge.processes import rabbitmq  # noqa: PLC0415 - pika only when it is used

    broker = config.BrokerConfig.from_env({config.BrokerConfig.ENVIRONMENT["url"]: BROKER_URL})
    try:
        rabbitmq.check_reachable(broker)
    except errors.BrokerError as exc:
        return str(exc)
    return None


def embedded_demo() -> int:
    """`flowforge demo` on the embedded default: this process's settings are the ones
    that cannot be reached, so the demo must not inherit them."""
    print(
        f"falling back to the embedded default: {config.DEFAULT_DATABASE_URL} with "
        f"in-process dispatch (`flowforge demo`)"
    )
    env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_UNSET}
    # The URL given as a flag: the commands the demo prints then carry it, so they find
    # the demo's database from this shell, where the unreachable variable is still set.
    demo = ["demo", "--database-url", config.DEFAULT_DATABASE_URL]
    return subprocess.call([sys.executable, "-m", "flowforge", *demo], env=env)


def flowforge_command() -> str:
    """How to run `flowforge` against the demo's database from this shell."""
    program = common.program_name()
    if config.DATABASE_URL_VARIABLE in os.environ:
        return program  # the user's shell has it set already
    return f"{program} --database-url {shlex.quote(DATABASE_URL)}"


def wait_for_run(app: FlowForge, run_id: UUID) -> WorkflowRunView:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        run = app.get_workflow_run(run_id)
        if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state) or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def report(app: FlowForge, run_id: UUID) -> None:
    """Each task's final state and attempts, read from the audit log."""
    print(f"\n{'task':<10} {'state':<10} attempts  transitions (from the audit log)")
    for task in app.task_runs(run_id):
        log = app.history(task.id)
        claims = [e for e in log if e.transition == "claim"]
        path = " -> ".join(e.transition for e in log if e.transition != "renew_lease")
        # Within 80 columns (issue #49: 130): a long path goes on under its task.
        lines = textwrap.wrap(path, REPORT_WIDTH - 32, break_on_hyphens=False) or [""]
        print(f"{task.task_key:<10} {task.state:<10} {len(claims):<9} {lines[0]}")
        for more in lines[1:]:
            print(f"{'':<32}{more}")


if __name__ == "__main__":
    sys.exit(main())
