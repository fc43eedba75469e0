"""``flowforge ui``: serve the web UI (``flowforge/ui``, docs/ui.md) until Ctrl-C.

Loopback only by default; any other ``--host`` needs ``FLOWFORGE_UI_TOKEN``, which
every request must then carry.
"""

from __future__ import annotations

import argparse
import ipaddress
import os

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
        shown = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving FlowForge's UI on http://{shown}:{args.port}/ (Ctrl-C stops)", flush=True)
        Server(app, token=token, host=args.host, port=args.port).run()
    return 0
