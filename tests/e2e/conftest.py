"""Fixtures the end-to-end CLI tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from flowforge.config import BrokerConfig
from tests import servers, topology
from tests.e2e.cluster import Cluster
from tests.e2e.test_cli import Cli, clean_environment, make_cli


@pytest.fixture(params=["sqlite", "postgres"])
def embedded_cli(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    """The CLI with no broker (embedded mode), on a fresh SQLite file or PostgreSQL
    database: the embedded runner's behaviour holds on both backends."""
    if request.param == "sqlite":
        yield initialised(make_cli(tmp_path))
        return
    servers.require_postgres()
    dbname = f"flowforge_scope_{uuid.uuid4().hex[:10]}"
    servers.admin(f'CREATE DATABASE "{dbname}"')
    try:
        url = servers.postgres_url(dbname)
        yield initialised(Cli(tmp_path, clean_environment(FLOWFORGE_DATABASE_URL=url)))
    finally:
        servers.admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def initialised(cli: Cli) -> Cli:
    """Migrations are explicit: the database gets its schema as a user's would."""
    done = cli("db", "init")
    assert done.returncode == 0, done.stderr
    return cli


@pytest.fixture
def production(tmp_path: Path) -> Iterator[Cli]:
    """A unique PostgreSQL database and RabbitMQ topology; removed afterwards."""
    servers.require_postgres()
    servers.require_rabbitmq()
    suffix = uuid.uuid4().hex[:10]
    dbname = f"flowforge_cli_{suffix}"
    admin_url = (
        f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:{servers.POSTGRES_PORT}"
    )
    names = {
        "FLOWFORGE_DISPATCH_EXCHANGE": f"ff-cli-{suffix}",
        "FLOWFORGE_DISPATCH_QUEUE": f"ff-cli-{suffix}.tasks",
        "FLOWFORGE_DISPATCH_ROUTING_KEY": f"ff-cli-{suffix}.tasks",
        "FLOWFORGE_DEAD_LETTER_EXCHANGE": f"ff-cli-{suffix}.dlx",
        "FLOWFORGE_DEAD_LETTER_QUEUE": f"ff-cli-{suffix}.dead",
    }
    with psycopg.connect(f"{admin_url}/{servers.POSTGRES_ADMIN_DB}", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    env = clean_environment(
        FLOWFORGE_DATABASE_URL=f"{admin_url}/{dbname}",
        FLOWFORGE_BROKER_URL=servers.RABBITMQ_URL,
        **names,
    )
    yield Cli(tmp_path, env)
    with psycopg.connect(f"{admin_url}/{servers.POSTGRES_ADMIN_DB}", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    topology.delete_topology(BrokerConfig.from_env(env))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A deployment's processes on the default servers (the HA tests bring their own)."""
    servers.require_postgres()
    servers.require_rabbitmq()
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.close()
