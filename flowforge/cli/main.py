"""``flowforge``: parse the command line, run the command, map errors to exit codes.

Every FlowForge error reaches the user as ``error: <message>`` on stderr and an exit
code from ``flowforge.cli.exits``; never as a traceback. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from flowforge import errors
from flowforge.cli import ending, logs, parser
from flowforge.cli.exits import EXIT_INTERRUPTED, EXIT_OK, exit_code_for

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser.build().parse_args(argv)
    logs.configure(args.log_level or args.default_log_level, args.log_format or "text")
    try:
        parser.check_unicode(args)
        handler = _handler(args.handler)
        # The composition root starts what every process reports through. Imported only
        # now, as the handler's module already did: `--help` never loads the engine.
        from flowforge import bootstrap  # noqa: PLC0415

        bootstrap.start_tracing(service_name(args.handler))
        return ending.end_process(handler(args))
    except errors.FlowForgeError as exc:
        report_error(exc)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `flowforge runs | head`: the reader left; say nothing more. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def service_name(handler: str) -> str:
    """The service a process's spans name, by its command (``flowforge-worker``)."""
    return f"flowforge-{handler.rpartition(':')[2].replace('_', '-')}"


def report_error(exc: BaseException) -> None:
    """``error: <first line>``; further lines (one problem each) indented beneath."""
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    print(f"error: {first}", file=sys.stderr)
    for line in rest:
        print(f"       {line}", file=sys.stderr)


def _handler(reference: str) -> Handler:
    """``module:function``, imported only now: ``--help`` never loads the engine.

    The cyclic garbage collector is off while the engine loads: the import leaves some
    50,000 objects and no garbage, so every collection it triggered only walked them:
    start-up CPU spent for nothing (docs/performance.md, "Design choices that buy the
    speed").
    """
    module_name, _, name = reference.partition(":")
    collecting = gc.isenabled()
    gc.disable()
    try:
        module = importlib.import_module(module_name)
    finally:
        if collecting:
            gc.enable()
    return cast(Handler, getattr(module, name))
