"""``flowforge ui``: serve the web UI (``flowforge/ui``, docs/ui.md) until Ctrl-C.

Loopback only by default; any other ``--host`` needs ``FLOWFORGE_UI_TOKEN``, which
every request must then carry.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket

from flowforge import errors
from flowforge.cli import common
from flowforge.cli.parser import UsageError

TOKEN_VARIABLE = "FLOWFORGE_UI_TOKEN"  # noqa: S105  (a variable's name, not a secret)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_port_free(host: str, port: int) -> None:
    """Refuse, before saying it serves, an address another process listens on (or one
    this machine does not have): uvicorn would say so only after our "serving" line,
    in its own words. A bind and a close, as uvicorn binds (SO_REUSEADDR): a port
    taken in between still fails, in uvicorn's words."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        why = (
            "the port is in use (another `flowforge ui`, or another server): pick another "
            "with --port"
            if exc.errno == errno.EADDRINUSE
            else f"{exc.strerror or exc}: check --host"
        )
        raise errors.ConfigurationError(f"cannot serve the UI on {host}:{port}: {why}") from None


def serve(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not is_loopback(args.host):
        raise UsageError(
            f"--host {args.host} is not a loopback address: set {TOKEN_VARIABLE} to a "
            f"secret every request must carry, or serve on 127.0.0.1"
        )
    from flowforge.ui.server import Server  # noqa: PLC0415  (only this command loads uvicorn)

    with common.open_app(common.settings_from(args)) as app:
        common.serve_metrics(args, app)
        check_port_free(args.host, args.port)
        shown = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving FlowForge's UI on http://{shown}:{args.port}/ (Ctrl-C stops)", flush=True)
        Server(app, token=token, host=args.host, port=args.port).run()
    return 0
