"""Where the test servers are, and whether a test may skip when one is unreachable.

A test that needs PostgreSQL or RabbitMQ skips locally when the server is down, and
fails when ``REQUIRE_POSTGRES=1`` / ``REQUIRE_RABBITMQ=1`` is set (as ``.ci/run`` does),
so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import random
import socket

import psycopg
import pytest

POSTGRES_HOST = os.environ.get("FLOWFORGE_TEST_PG_HOST", "127.0.0.1")
POSTGRES_PORT = int(os.environ.get("FLOWFORGE_TEST_PG_PORT", "5432"))
POSTGRES_USER = os.environ.get("FLOWFORGE_TEST_PG_USER", "postgres")
POSTGRES_ADMIN_DB = os.environ.get("FLOWFORGE_TEST_PG_DB", "test")

RABBITMQ_HOST = os.environ.get("FLOWFORGE_TEST_RABBITMQ_HOST", "127.0.0.1")
RABBITMQ_PORT = int(os.environ.get("FLOWFORGE_TEST_RABBITMQ_PORT", "5672"))
RABBITMQ_URL = os.environ.get(
    "FLOWFORGE_TEST_BROKER_URL", f"amqp://guest:guest@{RABBITMQ_HOST}:{RABBITMQ_PORT}/%2F"
)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


#: Where a test's own servers listen: below the kernel's ephemeral range (32768-60999
#: by default), so that no outgoing connection can take the port between the moment it
#: is picked and the moment the server binds it (a cluster node of the HA tests once
#: failed to boot in the full suite that way, or so its log suggested).
OWN_PORTS = range(20000, 32000)


def free_port() -> int:
    """A TCP port nobody listens on now, for a test's own server: one nobody binds in
    passing either (see ``OWN_PORTS``)."""
    for port in random.sample(OWN_PORTS, 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {OWN_PORTS} after 200 tries")


def require(name: str, host: str, port: int) -> None:
    """Skip (or fail under ``REQUIRE_<NAME>=1``) unless ``host:port`` accepts TCP."""
    if _reachable(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if os.environ.get(f"REQUIRE_{name.upper()}") == "1":
        pytest.fail(f"{message}, and REQUIRE_{name.upper()}=1 is set")
    pytest.skip(message)


def require_postgres() -> None:
    require("postgres", POSTGRES_HOST, POSTGRES_PORT)


def require_rabbitmq() -> None:
    require("rabbitmq", RABBITMQ_HOST, RABBITMQ_PORT)


def postgres_url(dbname: str) -> str:
    """The URL of database ``dbname`` on the test server."""
    return f"postgresql://{POSTGRES_USER}@{POSTGRES_HOST}:{POSTGRES_PORT}/{dbname}"


def admin(statement: str) -> None:
    """Run ``statement`` (CREATE/DROP DATABASE) on the admin database, autocommit."""
    with psycopg.connect(postgres_url(POSTGRES_ADMIN_DB), autocommit=True) as conn:
        conn.execute(statement.encode())
