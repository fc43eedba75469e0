"""The command line's grammar: argparse's parser, built from the commands as data.

Kept free of the engine's imports: each command names its handler as ``module:function``
and ``main`` imports it only when the command runs. The commands are
``flowforge/cli/grammar/``'s (:class:`~flowforge.cli.grammar.command.Command`, one module
per family, listed here in the order ``--help`` shows them); their flags are
``flowforge/cli/flags.py``'s.
"""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

from flowforge import errors
from flowforge.aggregates import json_values  # pure and light: --help stays fast
from flowforge.cli import flags
from flowforge.cli.grammar import maintenance, processes, reading, runs
from flowforge.cli.grammar.command import Command, Group


class UsageError(errors.FlowForgeError):
    """The command line is invalid; see the command's --help."""


EXIT_CODES_HELP = """\
exit codes:
  0    success (for run, rerun, status --watch and demo: the run succeeded)
  1    the run failed or was cancelled, or did not finish within --timeout;
       status: the run failed or was cancelled; db rebuild: rows differ from the log
  2    bad input: invalid workflow (the message names file and field), flag or
       setting; unknown run, task run, task key or task type; worker/publisher
       without a broker; a bad cron expression, time zone or schedule name; an
       unknown schedule
  3    a server is unreachable or failed: the database or the broker (host:port named)
  4    refused by the rules: cancelling a finished run; rerunning an unfinished run,
       or one whose every task succeeded without --from; a schedule name in use; a
       database created by a newer FlowForge schema version; a classic queue where a
       quorum queue is expected
  130  interrupted (Ctrl-C; SIGTERM during run and demo) with the run unfinished

configuration (flags override the environment):
  FLOWFORGE_DATABASE_URL   postgresql://user@host:5432/db or sqlite:///path.db
                           (default: sqlite:///.flowforge/flowforge.db)
  FLOWFORGE_LISTEN_DATABASE_URL
                           PostgreSQL itself, for the wake-up LISTEN when the
                           database URL goes through PgBouncer (default: that URL)
  FLOWFORGE_PREPARED_STATEMENTS
                           on (default) or off: off through PgBouncer (transaction mode)
  FLOWFORGE_BROKER_URL     amqp://user:password@host:5672/vhost; unset: embedded mode,
                           dispatch in-process (flowforge run / demo only)
  FLOWFORGE_DISPATCH_EXCHANGE, FLOWFORGE_DISPATCH_QUEUE, FLOWFORGE_DISPATCH_ROUTING_KEY,
  FLOWFORGE_DEAD_LETTER_EXCHANGE, FLOWFORGE_DEAD_LETTER_QUEUE: the broker's topology
  FLOWFORGE_UI_TOKEN       flowforge ui: the token every request must carry (needed
                           to serve beyond loopback)
"""

_MAIN_EXAMPLES = """\
examples:
  flowforge demo                                  # the example DAG, nothing to set up
  flowforge run examples/fan_out.toml --tasks examples.tasks --input rows=8
  flowforge status 5d668e5a                       # a run, by id or short id
  flowforge why 3f2a/enrich                       # why a task is (not) running

"""


#: The width ``--help`` wraps to (argparse's own reads $COLUMNS for the options).
HELP_WIDTH = 80


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (their examples' lines kept), except that a
    line too long for 80 columns is wrapped, at its own indentation: a description
    was one line of up to 531 characters."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        width = min(width, HELP_WIDTH)
        lines = []
        for line in text.splitlines():
            if len(indent + line) <= width:
                lines.append(indent + line)
                continue
            inner = indent + line[: len(line) - len(line.lstrip())]
            lines.append(
                textwrap.fill(line.strip(), width, initial_indent=inner, subsequent_indent=inner)
            )
        return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors as FlowForge's: one ``error:`` line (no usage
    block before it: the flag's own message says what is wrong), the closest name for a
    mistyped command or choice, and where the full usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}{did_you_mean(message)}\n       see `{self.prog} --help`\n")


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")


def did_you_mean(message: str) -> str:
    """`` (did you mean 'submit'?)`` for argparse's invalid choice close to a valid one."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return ""
    choices = re.findall(r"'([^']*)'", found["choices"])
    close = closest(found["given"], choices)
    return f"; did you mean {close!r}?" if close else ""


def closest(given: str, names: Sequence[str]) -> str | None:
    """The name in ``names`` closest to ``given``, if one is close enough to be a typo."""
    found = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return found[0] if found else None


def build() -> argparse.ArgumentParser:
    main = _Parser(
        prog="flowforge",
        description="FlowForge: an event-sourced workflow engine. DAGs of tasks run by "
        "workers; every state change is an event in the audit log.",
        epilog=_MAIN_EXAMPLES + EXIT_CODES_HELP,
        formatter_class=_Formatter,
        parents=[_global_options(suppress=False)],
    )
    main.add_argument("--version", action=_VersionAction, nargs=0, help=_VERSION_HELP)
    commands = main.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for group in maintenance.GROUPS:
        _group(commands, group)
    for command in COMMANDS:
        _command(commands, command)
    return main


def check_unicode(args: argparse.Namespace) -> None:
    """Refuse an argument that is not valid UTF-8, naming its option.

    Python passes such bytes on as lone surrogates, which no database can store and
    which would fail far from here, as a traceback.
    """
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and json_values.unicode_problem(text):
                shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                option = name if name in _POSITIONALS else "--" + name.replace("_", "-")
                raise UsageError(
                    f"{option} {shown}: not valid UTF-8 text; pass text (encode binary "
                    f"data, e.g. as base64)"
                )


_VERSION_HELP = "show program's version number and exit"


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, with the version looked up only when asked for:
    ``importlib.metadata`` and the lookup cost every command ~25 ms of its start-up
    (docs/performance.md, "Per feature")."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"flowforge {_version()}")
        parser.exit()


def _version() -> str:
    from importlib import metadata  # noqa: PLC0415 -- only --version needs it

    try:
        return metadata.version("flowforge")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def _global_options(
    *, suppress: bool, log_level: str | None = None, uses_broker: bool = True
) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name.

    On the subcommands their default is SUPPRESS, so an option given before the command
    name is not reset by the subcommand's parser. A subcommand's help shows its own log
    level, and hides --broker-url if it never uses a broker (it is still accepted).
    """
    default: Any = argparse.SUPPRESS if suppress else None
    broker_url = (
        flags.BROKER_URL if uses_broker else replace(flags.BROKER_URL, help=argparse.SUPPRESS)
    )
    log = flags.LOG_LEVEL
    if log_level:
        log = replace(log, help=f"log to stderr from this level (default: {log_level})")
    options = argparse.ArgumentParser(add_help=False)
    flags.add(
        options.add_argument_group("configuration"),
        (
            replace(flag, default=default)
            for flag in (flags.DATABASE_URL, broker_url, log, flags.LOG_FORMAT)
        ),
    )
    return options


def _group(commands: Any, group: Group) -> None:
    """A command of actions (``flowforge db init``): its help lists each action's example."""
    examples = "".join(f"\n  flowforge {group.name} {action.name}" for action in group.actions)
    parser = commands.add_parser(
        group.name,
        help=group.summary,
        description=group.description,
        epilog="example:" + examples,
        formatter_class=_Formatter,
    )
    subcommands = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    for action in group.actions:
        _command(subcommands, action)


def _command(commands: Any, command: Command) -> None:
    example = textwrap.indent(textwrap.dedent(command.example).strip("\n"), "  ")
    parser: argparse.ArgumentParser = commands.add_parser(
        command.name,
        help=command.summary,
        description=command.description or command.summary,
        epilog="example:\n" + example,
        formatter_class=_Formatter,
        parents=[
            _global_options(
                suppress=True, log_level=command.log_level, uses_broker=command.uses_broker
            )
        ],
    )
    parser.set_defaults(handler=command.handler, default_log_level=command.log_level)
    flags.add(parser, command.flags)


# --- the commands, in the order ``flowforge --help`` lists them ------------------------

COMMANDS = (
    runs.SUBMIT,
    runs.RUN,
    runs.RERUN,
    runs.DEMO,
    processes.WORKER,
    processes.SCHEDULER,
    processes.PUBLISHER,
    reading.RUNS,
    reading.STATUS,
    reading.HISTORY,
    reading.EVENTS,
    runs.CANCEL,
    reading.WHY,
    reading.LOGS,
    reading.UI,
)

#: The commands' positional arguments, named as their metavar's meaning, not as a flag.
_POSITIONALS = frozenset(
    flag.names[0]
    for command in (*COMMANDS, *maintenance.SCHEDULE_ACTIONS)
    for flag in command.flags
    if not flag.names[0].startswith("-")
)
