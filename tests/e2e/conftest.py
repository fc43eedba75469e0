"""Fixtures the end-to-end CLI tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers
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
