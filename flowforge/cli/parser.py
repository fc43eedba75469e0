"""The command line's grammar: every command, its arguments, its help and an example.

Kept free of the engine's imports: each command names its handler as ``module:function``
and ``main`` imports it only when the command runs.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from importlib import metadata
from typing import Any

from flowforge import errors
from flowforge.aggregates import json_values  # pure and light: --help stays fast
from flowforge.cli.logs import LEVELS
from flowforge.limits import MAX_BATCH, MAX_ROWS


class UsageError(errors.FlowForgeError):
    """The command line is invalid; see the command's --help."""


EXIT_CODES_HELP = """\
exit codes:
  0    success (for run, status --watch and demo: the run succeeded)
  1    the run failed or was cancelled, or did not finish within --timeout;
       status: the run failed or was cancelled; db rebuild: rows differ from the log
  2    bad input: invalid workflow (the message names file and field), flag or
       setting; unknown run, task run or task type; worker/publisher without a broker
  3    a server is unreachable or failed: the database or the broker (host:port named)
  4    refused by the rules: cancelling a finished run; a database created by a newer
       FlowForge schema version; a classic queue where a quorum queue is expected
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
"""

_MAIN_EXAMPLES = """\
examples:
  flowforge demo                                  # the example DAG, nothing to set up
  flowforge run examples/fan_out.toml --tasks examples.tasks --input rows=8
  flowforge status 3f2a                           # a run, by id or id prefix
  flowforge why 3f2a/enrich                       # why a task is (not) running

"""


def build() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="flowforge",
        description="FlowForge: an event-sourced workflow engine. DAGs of tasks run by "
        "workers; every state change is an event in the audit log.",
        epilog=_MAIN_EXAMPLES + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(suppress=False)],
    )
    main.add_argument("--version", action="version", version=f"flowforge {_version()}")
    commands = main.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _db(commands)
    _submit(commands)
    _run(commands)
    _demo(commands)
    _processes(commands)
    _inspection(commands)
    _why(commands)
    return main


#: The commands' positional arguments, named as their metavar's meaning, not as a flag.
_POSITIONALS = frozenset({"workflow", "run", "id", "task"})


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


def _version() -> str:
    try:
        return metadata.version("flowforge")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


# --- shared pieces -------------------------------------------------------------------


def _global_options(
    *, suppress: bool, log_level: str | None = None, uses_broker: bool = True
) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name.

    On the subcommands their default is SUPPRESS, so an option given before the command
    name is not reset by the subcommand's parser. A subcommand's help shows its own log
    level, and hides --broker-url if it never uses a broker (it is still accepted).
    """
    default: Any = argparse.SUPPRESS if suppress else None
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("configuration")
    group.add_argument(
        "--database-url",
        metavar="URL",
        default=default,
        help="overrides FLOWFORGE_DATABASE_URL (default: sqlite:///.flowforge/flowforge.db)",
    )
    group.add_argument(
        "--broker-url",
        metavar="URL",
        default=default,
        help="overrides FLOWFORGE_BROKER_URL (default: none; embedded, in-process dispatch)"
        if uses_broker
        else argparse.SUPPRESS,
    )
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=default,
        help=f"log to stderr from this level (default: {log_level})"
        if log_level
        else "log to stderr from this level (default: INFO for scheduler, publisher and "
        "worker; WARNING otherwise)",
    )
    return options


def _command(
    commands: Any,
    name: str,
    summary: str,
    example: str,
    handler: str,
    *,
    log_level: str = "WARNING",
    description: str = "",
    uses_broker: bool = True,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog="example:\n" + textwrap.indent(textwrap.dedent(example).strip("\n"), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(suppress=True, log_level=log_level, uses_broker=uses_broker)],
    )
    parser.set_defaults(handler=handler, default_log_level=log_level)
    return parser


# Every number a user gives is bounded here, before anything runs: past these a value
# is a typo, and unbounded ones overflow a thread's wait or a database parameter.
#: Workers in one process (threads); scale further with more processes.
MAX_WORKERS = 256
#: Seconds between a process's passes.
MAX_INTERVAL_S = 3600.0
#: Seconds `run --timeout` may wait (a week).
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def _whole_number(maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from 1 to {maximum}, got {text!r}"
            ) from None
        if not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be from 1 to {maximum}, got {value}")
        return value

    return parse


def _seconds(maximum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, e.g. 2.5, got {text!r}"
            ) from None
        if not 0 < value <= maximum:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(
                f"must be more than 0 and at most {maximum:g} seconds, got {text}"
            )
        return value

    return parse


def _grace_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, e.g. 2.5, got {text!r}"
        ) from None
    if not 0 <= value <= MAX_TIMEOUT_S:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be from 0 to {MAX_TIMEOUT_S:g} seconds, got {text}"
        )
    return value


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run input (repeatable, each KEY once). A VALUE that looks like JSON (starts "
        'with { [ or ", is true/false/null or a number) must be valid JSON; anything else '
        "is a string: rows=8 is a number, day=2026-01-31 a string (default: no inputs)",
    )


_WORKFLOW_HELP = "a .toml or .json workflow file, or package.module:attribute naming a definition"


def _add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=_whole_number(MAX_WORKERS),
        default=2,
        metavar="N",
        help="workers run in this process (default: 2)",
    )


def _add_idempotency_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a second submit with the same KEY returns the first run and creates nothing "
        "(default: none; every submit creates a run)",
    )


#: How long a stop of `run` or `demo` waits for the tasks in hand (flowforge/cli/stopping.py).
STOP_GRACE_S = 5.0


def _add_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=_grace_seconds,
        default=STOP_GRACE_S,
        metavar="S",
        help="on a stop, how long the tasks in hand may take to finish before they are "
        "abandoned; a second Ctrl-C ends the wait at once (default: %(default)s)",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _add_tasks(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--tasks",
        action="append",
        default=[],
        required=required,
        metavar="MODULE",
        help="import MODULE so its @task handlers are registered (repeatable)",
    )


# --- the commands --------------------------------------------------------------------


def _db(commands: Any) -> None:
    db = commands.add_parser(
        "db",
        help="create, migrate or rebuild the database",
        description="Database maintenance. Only db init / db migrate (and run, demo) "
        "change the schema; every other command checks its version.",
        epilog="example:\n  flowforge db init\n  flowforge db migrate\n  flowforge db rebuild",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = db.add_subparsers(title="actions", metavar="ACTION", required=True)
    _command(
        actions,
        "init",
        "create the tables or apply missing migrations (idempotent)",
        "flowforge db init\n  database sqlite .flowforge/flowforge.db: schema version 3, "
        "deployment 3f2a6c1e0b9d",
        "flowforge.cli.db:init",
    )
    _command(
        actions,
        "migrate",
        "apply the migrations the database lacks (the same as init; idempotent)",
        "flowforge db migrate\n  database postgres 127.0.0.1:5432/flowforge: schema version 1",
        "flowforge.cli.db:migrate",
    )
    _command(
        actions,
        "rebuild",
        "rebuild the tables from the event log, then verify every row against the log",
        """\
        flowforge db rebuild
          rebuilt 12 workflow runs and 60 task runs from 431 events
          verified 72 rows against the log: all match
        """,
        "flowforge.cli.db:rebuild",
    )


def _submit(commands: Any) -> None:
    parser = _command(
        commands,
        "submit",
        "validate a workflow and start a run; prints the run id",
        """\
        flowforge submit examples/fan_out.toml --input rows=8 --idempotency-key nightly-01
          3f2a6c1e-...
        """,
        "flowforge.cli.runs:submit",
        description="Validate a workflow (a .toml/.json file or module:attr) and start a "
        "run. With --idempotency-key, a second submit returns the first run instead of "
        "creating another. Processes (flowforge scheduler/publisher/worker) run it.",
    )
    parser.add_argument("workflow", metavar="FILE|module:attr", help=_WORKFLOW_HELP)
    _add_inputs(parser)
    _add_idempotency_key(parser)
    _add_json(parser)


def _run(commands: Any) -> None:
    parser = _command(
        commands,
        "run",
        "submit a workflow and run it here to the end, with live progress",
        """\
        flowforge run examples/fan_out.toml --tasks examples.tasks --workers 3 --input rows=8
        """,
        "flowforge.cli.runs:run",
        description="Submit a workflow and run the scheduler, the publisher and N workers "
        "in this process until the run finishes (--resume RUN: run an existing run "
        "instead). Dispatch is in-process unless a broker is configured. Only runs whose "
        "every task type has a handler here are run; other runs are left alone. Exits 0 "
        "if the run succeeded, 1 with the failed tasks' errors. --timeout or a first "
        "Ctrl-C stops, letting the tasks in hand finish for up to --grace seconds; a "
        "second Ctrl-C stops at once.",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="run an existing run (id or prefix) to the end instead of submitting one",
    )
    parser.add_argument("workflow", metavar="FILE|module:attr", nargs="?", help=_WORKFLOW_HELP)
    _add_workers(parser)
    _add_tasks(parser, required=False)
    _add_inputs(parser)
    _add_idempotency_key(parser)
    parser.add_argument(
        "--timeout",
        type=_seconds(MAX_TIMEOUT_S),
        metavar="S",
        help="stop after S seconds (the tasks in hand then get --grace seconds to finish) "
        "(default: wait until the run finishes)",
    )
    _add_grace(parser)


def _demo(commands: Any) -> None:
    parser = _command(
        commands,
        "demo",
        "run the example fan-out/fan-in DAG end to end, then show its history",
        "flowforge demo",
        "flowforge.cli.runs:demo",
        description="Run the example DAG (extract -> clean, enrich, score -> load; enrich "
        "fails once and succeeds on retry) with in-process dispatch, then print its "
        "history and the commands that inspect it. The run stays in the database (the "
        "embedded default .flowforge/flowforge.db unless FLOWFORGE_DATABASE_URL is set), "
        "where `flowforge runs` finds it.",
        uses_broker=False,  # the demo always dispatches in-process
    )
    _add_workers(parser)
    _add_grace(parser)


def _processes(commands: Any) -> None:
    worker = _command(
        commands,
        "worker",
        "consume dispatches and run task handlers (needs a broker)",
        "FLOWFORGE_BROKER_URL=amqp://guest:guest@localhost:5672/%2F "
        "flowforge worker --tasks examples.tasks --concurrency 4",
        "flowforge.cli.processes:worker",
        log_level="INFO",
        description="A worker process: claims dispatched tasks and runs their handlers "
        "(imported with --tasks). Stops cleanly on SIGTERM/SIGINT.",
    )
    _add_tasks(worker, required=True)
    worker.add_argument(
        "--concurrency",
        type=_whole_number(MAX_WORKERS),
        default=1,
        metavar="N",
        help="workers in this process, sharing one stop signal (default: 1)",
    )
    worker.add_argument(
        "--batch",
        type=_whole_number(MAX_BATCH),
        default=1,
        metavar="N",
        help="dispatches each worker takes at once when they are waiting: claimed in one "
        "transaction, their outcomes written in one; handlers still run one at a time "
        "(default: 1; docs/worker.md, 'Batches')",
    )
    worker.add_argument(
        "--worker-id",
        metavar="ID",
        help="the worker's name in the audit log and the logs; with --concurrency N, "
        "ID-1 ... ID-N (default: <hostname>-<random>)",
    )
    scheduler = _command(
        commands,
        "scheduler",
        "advance runs, schedule retries and reap expired leases",
        "flowforge scheduler --interval 0.5",
        "flowforge.cli.processes:scheduler",
        log_level="INFO",
    )
    scheduler.add_argument(
        "--interval",
        type=_seconds(MAX_INTERVAL_S),
        default=1.0,
        metavar="S",
        help="seconds between passes (default: 1.0)",
    )
    publisher = _command(
        commands,
        "publisher",
        "publish the outbox's dispatches to the broker (needs a broker)",
        "flowforge publisher --batch-size 500 --interval 0.2",
        "flowforge.cli.processes:publisher",
        log_level="INFO",
    )
    publisher.add_argument(
        "--batch-size",
        type=_whole_number(MAX_ROWS),
        default=500,
        metavar="N",
        help="dispatches published per transaction, at most (default: 500)",
    )
    publisher.add_argument(
        "--interval",
        type=_seconds(MAX_INTERVAL_S),
        default=0.2,
        metavar="S",
        help="seconds to wait after a sweep that found nothing (default: 0.2)",
    )


def _inspection(commands: Any) -> None:
    runs = _command(
        commands,
        "runs",
        "list recent runs with their state and duration",
        "flowforge runs --limit 5",
        "flowforge.cli.inspect:runs",
    )
    runs.add_argument(
        "--limit",
        type=_whole_number(MAX_ROWS),
        default=20,
        metavar="N",
        help="show the N most recent runs (default: 20)",
    )
    _add_json(runs)
    status = _command(
        commands,
        "status",
        "a run's tasks with state, attempt, duration and error",
        "flowforge status 3f2a --watch",
        "flowforge.cli.inspect:status",
        description="A run's tasks with state, attempt, duration and error. Exits 1 if "
        "the run failed or was cancelled; --watch follows it until it finishes.",
    )
    status.add_argument("run", metavar="RUN", help="a run id or a unique prefix of one")
    status.add_argument("--watch", action="store_true", help="follow until the run finishes")
    _add_json(status)
    history = _command(
        commands,
        "history",
        "the audit log: every transition of every attempt",
        "flowforge history 3f2a            # a run and all its tasks\n"
        "flowforge history 3f2a/enrich     # one task run (or its id)",
        "flowforge.cli.inspect:history",
    )
    history.add_argument("id", metavar="RUN|TASK_RUN", help="an id, id prefix or RUN/TASK_KEY")
    _add_json(history)
    cancel = _command(
        commands,
        "cancel",
        "cancel a pending or running run and its unfinished tasks",
        "flowforge cancel 3f2a",
        "flowforge.cli.runs:cancel",
    )
    cancel.add_argument("run", metavar="RUN", help="a run id or a unique prefix of one")


def _why(commands: Any) -> None:
    why = _command(
        commands,
        "why",
        "explain why a task is not running (or did not run)",
        """\
        flowforge why 3f2a/load
          load is waiting for 1 upstream task: enrich (retrying, attempt 2 due at 12:03:05)
        flowforge why 3f2a/load --at 2026-01-31T12:03:00Z    # as of a past moment
        """,
        "flowforge.cli.inspect:why",
        description="Explain a task run's state: the upstream tasks it waits on, a retry "
        "backoff, a dispatch not yet published or claimed, the worker holding its lease, "
        "the run's end that cancelled it. --at answers from the event log as of a past "
        "moment.",
    )
    why.add_argument("task", metavar="TASK_RUN", help="a task run id, id prefix or RUN/TASK_KEY")
    why.add_argument(
        "--at",
        metavar="TIME",
        help="ISO 8601 time (UTC unless it carries an offset), e.g. 2026-01-31T12:03:00Z",
    )
    _add_json(why)
