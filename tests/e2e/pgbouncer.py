"""A PgBouncer of a test's own: its own port, config and log in a temporary directory.

It pools one database of the shared PostgreSQL in transaction mode; the caller stops it
in a ``finally`` (``with pgbouncer(...)``). Nothing of the shared server's state changes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests import servers

#: Debian installs it outside a normal user's PATH.
BINARY_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
STARTUP_S = 30.0


def binary() -> str:
    """PgBouncer's executable; skips (fails under REQUIRE_POSTGRES=1) when missing."""
    found = shutil.which("pgbouncer") or next(
        (path for path in BINARY_PATHS if os.access(path, os.X_OK)), None
    )
    if found:
        return found
    message = "pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does)"
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{message}, and REQUIRE_POSTGRES=1 is set")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(directory: Path, dbname: str, port: int, pool_size: int) -> str:
    return f"""\
[databases]
{dbname} = host={servers.POSTGRES_HOST} port={servers.POSTGRES_PORT} dbname={dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "userlist.txt"}
admin_users = {servers.POSTGRES_USER}
pool_mode = transaction
default_pool_size = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
logfile = {directory / "pgbouncer.log"}
pidfile = {directory / "pgbouncer.pid"}
"""


@contextmanager
def pgbouncer(dbname: str, *, pool_size: int) -> Iterator[str]:
    """Run PgBouncer in front of ``dbname``; yield the database URL that goes through it."""
    executable = binary()
    directory = Path(tempfile.mkdtemp(prefix="ff-pgbouncer-"))
    port = _free_port()
    (directory / "pgbouncer.ini").write_text(_config(directory, dbname, port, pool_size))
    (directory / "userlist.txt").write_text(f'"{servers.POSTGRES_USER}" ""\n')
    command = [executable, "-q", str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: it switches to the database's system user,
        # who must be able to read the config and write the log.
        command[1:1] = ["-u", "postgres"]
        shutil.chown(directory, "postgres")
        for child in directory.iterdir():
            shutil.chown(child, "postgres")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"postgresql://{servers.POSTGRES_USER}@127.0.0.1:{port}/{dbname}"
    try:
        _wait_until_accepting(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_accepting(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while True:
        if process.poll() is not None:
            error = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"pgbouncer exited with {process.returncode}: {error}")
        try:
            with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
