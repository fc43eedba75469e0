"""When a server is up but what the URL names is not there, the error says which thing
is missing and the command that creates it, instead of "check that it is running".
Against the real servers."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests import servers
from tests.e2e.inprocess import InProcess, on_sqlite
from tests.e2e.test_cli import one_line_error

POSTGRES = f"{servers.POSTGRES_HOST}:{servers.POSTGRES_PORT}"


@pytest.fixture
def cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> InProcess:
    return on_sqlite(tmp_path, capsys, monkeypatch)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.mark.postgres
def test_a_missing_database_is_named_with_the_createdb_command(cli: InProcess) -> None:
    servers.require_postgres()
    name = unique("ff_missing_db")
    cli.database_url = f"postgresql://{servers.POSTGRES_USER}@{POSTGRES}/{name}"
    done = cli("runs")
    assert done.returncode == exits.EXIT_UNREACHABLE
    line = one_line_error(done)
    assert f"has no database {name!r}" in line
    host, port = POSTGRES.split(":")
    assert f"createdb -h {host} -p {port} -U postgres {name}" in line
    assert "check that it is running" not in line


@pytest.mark.postgres
def test_a_missing_role_is_named_with_the_create_role_command(cli: InProcess) -> None:
    servers.require_postgres()
    role = unique("ff_missing_role")
    cli.database_url = f"postgresql://{role}@{POSTGRES}/{servers.POSTGRES_ADMIN_DB}"
    line = one_line_error(cli("runs"))
    assert f"has no role (user) {role!r}" in line
    assert f'CREATE ROLE "{role}" LOGIN' in line
    assert "check that it is running" not in line


@pytest.mark.rabbitmq
def test_a_missing_vhost_is_named_with_the_add_vhost_command(cli: InProcess) -> None:
    servers.require_rabbitmq()
    vhost = unique("ff-missing-vhost")
    url = f"amqp://guest:guest@{servers.RABBITMQ_HOST}:{servers.RABBITMQ_PORT}/{vhost}"
    done = cli("worker", "--tasks", "examples.tasks", "--broker-url", url)
    assert done.returncode == exits.EXIT_UNREACHABLE
    line = one_line_error(done)
    assert f"has no virtual host {vhost!r}" in line
    assert f"rabbitmqctl add_vhost {vhost}" in line
    assert f"rabbitmqctl set_permissions -p {vhost} guest" in line
    assert "fix the vhost in --broker-url" in line
    assert "is running and reachable" not in line


def test_an_unreachable_server_still_says_to_check_it_is_running(cli: InProcess) -> None:
    cli.database_url = "postgresql://postgres@127.0.0.1:1/flowforge"  # nothing listens
    line = one_line_error(cli("runs"))
    assert "check that it is running and reachable" in line


@pytest.mark.parametrize("command", [["scheduler"], ["publisher", "--broker-url", "amqp://x"]])
def test_a_long_running_process_started_while_its_database_is_down_exits_as_unreachable(
    cli: InProcess, command: list[str]
) -> None:
    # At start it exits at once with the one-line error and EXIT_UNREACHABLE, so its
    # supervisor restarts it (docs/deployment.md's units: Restart=on-failure); once
    # running, the same outage is logged and retried (processes/scheduler.py, publisher.py).
    cli.database_url = "postgresql://postgres@127.0.0.1:1/flowforge"  # nothing listens
    done = cli(*command)
    assert done.returncode == exits.EXIT_UNREACHABLE
    assert "check that it is running and reachable" in one_line_error(done)
