"""`flowforge ui` as a user starts it: the real process, serving over HTTP; and its
refusal to listen beyond loopback without a token."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from flowforge.aggregates.ids import short_id
from flowforge.app.service import FlowForge
from tests.e2e.test_cli import Cli, clean_environment, one_line_error
from tests.helpers import work

STARTUP_S = 20.0
CHAIN = {
    "name": "chain",
    "tasks": [
        {"key": "extract", "type": "work"},
        {"key": "load", "type": "work", "depends_on": ["extract"]},
    ],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str, deadline: float) -> str:
    """The page at ``url``, retried until the server listens (or the deadline)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_flowforge_ui_serves_the_runs_page(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flowforge.db'}"
    with FlowForge(url, migrate=True) as app:
        run_id = app.start_workflow_run(CHAIN)
        work(app, run_id, "extract")
        work(app, run_id, "load")
    port = free_port()
    cli = Cli(tmp_path, clean_environment(FLOWFORGE_DATABASE_URL=url))
    server = cli.popen("ui", "--port", str(port), log=tmp_path / "ui.log")
    try:
        page = get(f"http://127.0.0.1:{port}/", time.monotonic() + STARTUP_S)
        assert short_id(run_id) in page
        assert "succeeded" in page
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert "serving FlowForge's UI on http://127.0.0.1:" in (tmp_path / "ui.log").read_text()


def test_flowforge_ui_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    cli = Cli(tmp_path, clean_environment())
    done = cli("ui", "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "FLOWFORGE_UI_TOKEN" in one_line_error(done)
    assert not (tmp_path / ".flowforge").exists()  # refused before opening anything


def test_flowforge_ui_on_a_busy_port_fails_before_saying_it_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flowforge.db'}"
    FlowForge(url, migrate=True).close()
    cli = Cli(tmp_path, clean_environment(FLOWFORGE_DATABASE_URL=url))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = cli("ui", "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert "serving" not in done.stdout + done.stderr
    assert one_line_error(done) == (
        f"error: cannot serve the UI on 127.0.0.1:{port}: the port is in use (another "
        f"`flowforge ui`, or another server): pick another with --port"
    )
