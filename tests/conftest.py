"""Shared fixtures: an application service on PostgreSQL and on SQLite.

The PostgreSQL fixtures use one database per test session (``flowforge_test_<pid>``),
migrated once when it is created and emptied before each test, so tests never see each
other's rows. Migrations are explicit: each fixture creates its schema with
``migrate=True``; the services the tests use then only check the version, as every
production process does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from flowforge.app.service import FlowForge
from flowforge.projections.db import pipeline
from tests import servers
from tests.helpers import RoundTrip

TABLES = (
    *("dispatch_outbox", "task_runs", "workflow_runs", "flowforge_events", "run_wakeups"),
    *("task_type_limits", "run_limits", "held_dispatches", "schedules", "archived_runs"),
)


def _admin_url(dbname: str) -> str:
    return (
        f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:"
        f"{servers.POSTGRES_PORT}/{dbname}"
    )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; dropped afterwards."""
    servers.require_postgres()
    name = f"flowforge_test_{os.getpid()}"
    with psycopg.connect(_admin_url(servers.POSTGRES_ADMIN_DB), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    FlowForge(_admin_url(name), migrate=True).close()
    yield _admin_url(name)
    with psycopg.connect(_admin_url(servers.POSTGRES_ADMIN_DB), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def empty_postgres(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('public.task_runs') IS NOT NULL").fetchone()
        if exists and exists[0]:
            conn.execute(f"TRUNCATE {', '.join(TABLES)}")


@pytest.fixture
def pg_app(postgres_url: str) -> Iterator[FlowForge]:
    empty_postgres(postgres_url)
    app = FlowForge(postgres_url)
    yield app
    app.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'flowforge.db'}"


@pytest.fixture
def sqlite_app(sqlite_url: str) -> Iterator[FlowForge]:
    FlowForge(sqlite_url, migrate=True).close()
    app = FlowForge(sqlite_url, migrate=False)
    yield app
    app.close()


@pytest.fixture(params=["postgres", "sqlite"])
def app(request: pytest.FixtureRequest) -> FlowForge:
    """The application service on each backend: the contract tests run on both."""
    fixture = "pg_app" if request.param == "postgres" else "sqlite_app"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[RoundTrip]:
    """Every round trip to PostgreSQL from here on (a pipeline's, a ROLLBACK's), and
    whether it committed (``tests.helpers.RoundTrip``)."""
    sent: list[RoundTrip] = []
    send_pipeline, simple_query = pipeline._pipeline, pipeline._simple_query

    def counted_pipeline(conn: psycopg.Connection[Any], session: Any, batch: Any) -> Any:
        trip = RoundTrip(b";\n".join(query.body for query in batch))
        sent.append(trip)
        results = send_pipeline(conn, session, batch)
        trip.committed = conn.info.transaction_status == pq.TransactionStatus.IDLE
        return results

    def counted_query(conn: psycopg.Connection[Any], query: bytes) -> Any:
        sent.append(RoundTrip(query))
        return simple_query(conn, query)

    monkeypatch.setattr(pipeline, "_pipeline", counted_pipeline)
    monkeypatch.setattr(pipeline, "_simple_query", counted_query)
    return sent
