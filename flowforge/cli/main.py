"""``flowforge``: parse the command line, run the command, map errors to exit codes.

Every FlowForge error reaches the user as ``error: <message>`` on stderr and an exit
code from :data:`EXIT_CODES`; never as a traceback. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from flowforge import errors
from flowforge.cli import logs, parser

EXIT_OK = 0
#: The run failed, was cancelled, or did not finish in time; a rebuild found differences.
EXIT_FAILED = 1
#: Bad input: an invalid workflow, flag or setting; an unknown run, task or task type.
EXIT_BAD_INPUT = 2
#: A server (the database or the broker) is unreachable or failed.
EXIT_UNREACHABLE = 3
#: Refused by the rules: cancelling a finished run; a database of a newer schema version.
EXIT_REFUSED = 4
#: Interrupted by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

#: The first matching class decides, so subclasses come before their bases.
EXIT_CODES: tuple[tuple[type[errors.FlowForgeError], int], ...] = (
    (parser.UsageError, EXIT_BAD_INPUT),
    (errors.InvalidWorkflowDefinitionError, EXIT_BAD_INPUT),
    (errors.UnknownRunError, EXIT_BAD_INPUT),
    (errors.UnknownTaskTypeError, EXIT_BAD_INPUT),
    (errors.ConfigurationError, EXIT_BAD_INPUT),
    (errors.IllegalTransitionError, EXIT_BAD_INPUT),
    (errors.SchemaVersionError, EXIT_REFUSED),
    (errors.QueueTypeMismatchError, EXIT_REFUSED),
    (errors.DomainError, EXIT_REFUSED),
    (errors.PersistenceError, EXIT_UNREACHABLE),
    (errors.BrokerError, EXIT_UNREACHABLE),
)

Handler = Callable[[argparse.Namespace], int]


def exit_code_for(exc: errors.FlowForgeError) -> int:
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = parser.build().parse_args(argv)
    logs.configure(args.log_level or args.default_log_level)
    try:
        return _handler(args.handler)(args)
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


def report_error(exc: BaseException) -> None:
    """``error: <first line>``; further lines (one problem each) indented beneath."""
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    print(f"error: {first}", file=sys.stderr)
    for line in rest:
        print(f"       {line}", file=sys.stderr)


def _handler(reference: str) -> Handler:
    """``module:function``, imported only now: ``--help`` never loads the engine."""
    module_name, _, name = reference.partition(":")
    return cast(Handler, getattr(importlib.import_module(module_name), name))
