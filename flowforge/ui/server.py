"""Serving the web UI: in the foreground (``flowforge ui``) or in a thread of the calling
process (``serving``: a UI beside an embedded runner, and the tests' and benchmarks'
real server)."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from flowforge.app.service import FlowForge
from flowforge.ui.web import create_app

#: How long a stop waits for open requests (the event streams end as it begins).
GRACE_S = 1
#: How long ``serving`` waits for the server to listen, and then to stop.
START_S = 10.0


class Server(uvicorn.Server):
    """uvicorn's server, which ends the pages' event streams when told to stop (Ctrl-C,
    SIGTERM, :func:`serving`'s end), so that it has no open request to wait for."""

    def __init__(self, app: FlowForge, *, token: str | None, host: str, port: int) -> None:
        self.ui = create_app(app, token=token)
        config = uvicorn.Config(
            self.ui, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACE_S
        )
        super().__init__(config)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.ui.state.feed.close()
        super().handle_exit(sig, frame)


@contextmanager
def serving(
    app: FlowForge, *, token: str | None = None, host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """The UI over ``app`` in a thread, on ``port`` (0: a free one), until the block ends;
    yields its base URL."""
    port = port or free_port(host)
    server = Server(app, token=token, host=host, port=port)
    thread = threading.Thread(target=server.run, name="flowforge-ui-server", daemon=True)
    thread.start()
    try:
        started = threading.Event()
        for _ in range(int(START_S / 0.02)):
            if server.started or not thread.is_alive():
                break
            started.wait(0.02)
        if not server.started:
            raise RuntimeError(f"the UI did not start on {host}:{port} within {START_S} s")
        yield f"http://{host}:{port}"
    finally:
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=START_S)


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
