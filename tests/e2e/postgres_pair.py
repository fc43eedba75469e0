"""A PostgreSQL primary and a synchronous streaming standby, for the high-availability tests.

Both are Debian clusters of their own (``pg_createcluster <version> NAME -p PORT``) with
unique names and free ports; the machine's default cluster ``main`` is never touched.
The primary lists every standby in ``synchronous_standby_names``, so a commit returns
only once the standby has flushed it: what a client saw committed survives the
primary's loss. :meth:`destroy` drops both clusters (``pg_dropcluster --stop``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import psycopg

from tests import servers

COMMAND_TIMEOUT_S = 120


def remove_leftovers() -> None:
    """Drop the clusters of a test run that died before its ``finally`` (``ffha_*``)."""
    listing = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=False
    )
    for line in listing.stdout.splitlines():
        version, name, *_ = line.split()
        if name.startswith("ffha_"):
            subprocess.run(
                ["pg_dropcluster", "--stop", version, name],
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )


class PostgresPair:
    def __init__(self) -> None:
        self.version = sorted(Path("/etc/postgresql").iterdir())[-1].name
        suffix = uuid.uuid4().hex[:6]
        self.primary = f"ffha_{suffix}_a"
        self.standby = f"ffha_{suffix}_b"
        self.ports = {self.primary: servers.free_port(), self.standby: servers.free_port()}

    @property
    def hosts(self) -> str:
        """``host:port,host:port`` for a URL: the primary first, then the standby."""
        return ",".join(f"127.0.0.1:{self.ports[name]}" for name in (self.primary, self.standby))

    def start(self) -> None:
        self._create(
            self.primary,
            # '*': any standby counts, so a commit waits for the one there is.
            "synchronous_standby_names=*",
            "synchronous_commit=on",
        )
        self.ctl(self.primary, "start")
        self._create(self.standby)
        data = self.data_directory(self.standby)
        for entry in data.iterdir():  # the standby's data is a base backup of the primary
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        _run(
            "runuser", "-u", "postgres", "--",
            f"/usr/lib/postgresql/{self.version}/bin/pg_basebackup",
            "-h", "127.0.0.1", "-p", str(self.ports[self.primary]), "-U", "postgres",
            "-D", str(data), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        self.ctl(self.standby, "start")
        self._await_synchronous_standby()

    def stop_primary_hard(self) -> None:
        """Immediate shutdown: every backend is killed, nothing is flushed or handed over."""
        self.ctl(self.primary, "stop", "-m", "immediate")

    def promote_standby(self) -> None:
        self.ctl(self.standby, "promote")  # waits until the standby accepts writes

    def url(self, name: str, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[name]}/{dbname}"

    def data_directory(self, name: str) -> Path:
        return Path(f"/var/lib/postgresql/{self.version}/{name}")

    def destroy(self) -> None:
        """Stop and drop both clusters, and remove whatever a failed creation left."""
        for name in (self.standby, self.primary):
            subprocess.run(
                ["pg_dropcluster", "--stop", self.version, name],
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
            shutil.rmtree(self.data_directory(name), ignore_errors=True)
            shutil.rmtree(f"/etc/postgresql/{self.version}/{name}", ignore_errors=True)

    def ctl(self, name: str, action: str, *options: str) -> None:
        _run("pg_ctlcluster", "--skip-systemctl-redirect", self.version, name, action, *options)

    def log_tail(self, name: str, lines: int = 20) -> str:
        log = Path(f"/var/log/postgresql/postgresql-{self.version}-{name}.log")
        text = log.read_text(errors="replace").splitlines() if log.exists() else []
        return f"--- {name} ---\n" + "\n".join(text[-lines:])

    def _create(self, name: str, *settings: str) -> None:
        options = [option for setting in settings for option in ("-o", setting)]
        _run(
            "pg_createcluster", "--quiet", "--start-conf=manual", self.version, name,
            "-p", str(self.ports[name]), *options,
            "--", "--auth=trust",
        )  # fmt: skip

    def _await_synchronous_standby(self) -> None:
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        with psycopg.connect(self.url(self.primary), autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
                if row is not None and row[0] == "sync":
                    return
                time.sleep(0.1)
        raise RuntimeError(
            f"the standby never streamed synchronously\n{self.log_tail(self.standby)}"
        )


def _run(*command: str) -> None:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}): {result.stdout}{result.stderr}"
        )
