"""The command line's grammar: every command, its arguments, its help and an example.

Kept free of the engine's imports: each command names its handler as ``module:function``
and ``main`` imports it only when the command runs. The commands are data
(:class:`Command`, in the order ``--help`` lists them); their flags are
``flowforge/cli/flags.py``'s.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any

from flowforge import errors
from flowforge.aggregates import json_values  # pure and light: --help stays fast
from flowforge.cli import flags
from flowforge.cli.flags import Flag
from flowforge.projections.migration_files import migration_files

#: The schema version a database gets from this FlowForge, for the help's examples.
SCHEMA_VERSION = len(migration_files())


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


@dataclass(frozen=True, slots=True)
class Command:
    """One command: its help, an example, the handler it runs and the flags it takes."""

    name: str
    summary: str
    example: str
    #: ``module:function``, imported only when the command runs.
    handler: str
    flags: tuple[Flag, ...] = ()
    #: The --help text (default: the summary).
    description: str = ""
    log_level: str = "WARNING"
    #: False hides --broker-url from its help (it is still accepted).
    uses_broker: bool = True


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
    _group(
        commands,
        "db",
        "create, migrate or rebuild the database",
        "Database maintenance. Only db init / db migrate (and run, demo) change the schema; "
        "every other command checks its version.",
        DB_ACTIONS,
    )
    _group(
        commands,
        "broker",
        "upgrade the broker's queues",
        "Broker maintenance: `broker migrate` moves the dispatches of the one queue of a "
        "FlowForge before routing to their task types' queues (docs/deployment.md, "
        "'Upgrading to per-type queues').",
        BROKER_ACTIONS,
    )
    _group(
        commands,
        "schedule",
        "start a workflow on a cron schedule",
        "Cron schedules: each fire time of the expression, in its time zone, starts a run "
        "of the workflow, exactly once, even with several schedulers. A deployment's "
        "`flowforge scheduler` fires them (docs/scheduling/cron.md).",
        SCHEDULE_ACTIONS,
    )
    _group(
        commands,
        "limit",
        "set, unset or list concurrency limits on task types",
        "Concurrency limits: at most N tasks of a type run at once, from the next claim "
        "on (docs/scheduling/limits.md). Each change is recorded in the audit log.",
        LIMIT_ACTIONS,
    )
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


def _version() -> str:
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


def _group(
    commands: Any, name: str, summary: str, description: str, actions: Sequence[Command]
) -> None:
    """A command of actions (``flowforge db init``): its help lists each action's example."""
    examples = "".join(f"\n  flowforge {name} {action.name}" for action in actions)
    group = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog="example:" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subcommands = group.add_subparsers(title="actions", metavar="ACTION", required=True)
    for action in actions:
        _command(subcommands, action)


def _command(commands: Any, command: Command) -> None:
    example = textwrap.indent(textwrap.dedent(command.example).strip("\n"), "  ")
    parser: argparse.ArgumentParser = commands.add_parser(
        command.name,
        help=command.summary,
        description=command.description or command.summary,
        epilog="example:\n" + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            _global_options(
                suppress=True, log_level=command.log_level, uses_broker=command.uses_broker
            )
        ],
    )
    parser.set_defaults(handler=command.handler, default_log_level=command.log_level)
    flags.add(parser, command.flags)


# --- the commands --------------------------------------------------------------------

DB_ACTIONS = (
    Command(
        "init",
        "create the tables or apply missing migrations (idempotent)",
        "flowforge db init\n  database sqlite .flowforge/flowforge.db: schema version "
        f"{SCHEMA_VERSION}, deployment 3f2a6c1e0b9d",
        "flowforge.cli.db:init",
    ),
    Command(
        "migrate",
        "apply the migrations the database lacks (the same as init; idempotent)",
        "flowforge db migrate\n  database postgres 127.0.0.1:5432/flowforge: schema version "
        f"{SCHEMA_VERSION}",
        "flowforge.cli.db:migrate",
    ),
    Command(
        "rebuild",
        "rebuild the tables from the event log, then verify every row against the log",
        """\
        flowforge db rebuild
          rebuilt 12 workflow runs and 60 task runs from 431 events
          verified 72 rows against the log: all match
        """,
        "flowforge.cli.db:rebuild",
    ),
)

BROKER_ACTIONS = (
    Command(
        "migrate",
        "move the dispatches of the single queue of an older FlowForge to their types' "
        "queues (idempotent)",
        """\
        flowforge broker migrate
          moved 3 dispatches to flowforge.3f2a6c1e0b9d.tasks.extract
          deleted flowforge.3f2a6c1e0b9d.tasks: the migration is complete
        """,
        "flowforge.cli.broker:migrate",
    ),
)

SCHEDULE_ACTIONS = (
    Command(
        "add",
        "add a schedule: a run of the workflow at each fire time",
        """\
        flowforge schedule add nightly --cron "30 2 * * *" --timezone Europe/Paris \\
            examples/fan_out.toml --input rows=8
          schedule nightly: fan_out at 30 2 * * * (Europe/Paris), next 2026-01-31 02:30:00 CET
        """,
        "flowforge.cli.schedules:add",
        (
            flags.SCHEDULE_NAME,
            flags.CRON,
            flags.TIMEZONE,
            flags.CATCH_UP,
            flags.WORKFLOW,
            flags.INPUT,
            flags.JSON,
        ),
        description="Add a schedule: at each fire time of --cron in --timezone (DST "
        "included), the scheduler starts a run of the workflow with the --input values, "
        "exactly once. After a scheduler downtime it runs the latest missed fire time "
        "once, and the N newest older ones with --catch-up N.",
    ),
    Command(
        "list",
        "the schedules: state, cron, next fire, last fire and its run",
        "flowforge schedule list",
        "flowforge.cli.schedules:list_schedules",
        (flags.JSON,),
    ),
    Command(
        "pause",
        "stop firing a schedule until it is resumed",
        "flowforge schedule pause nightly",
        "flowforge.cli.schedules:pause",
        (flags.SCHEDULE_NAME,),
    ),
    Command(
        "resume",
        "fire a paused schedule again, from its next fire time after now",
        "flowforge schedule resume nightly",
        "flowforge.cli.schedules:resume",
        (flags.SCHEDULE_NAME,),
    ),
    Command(
        "delete",
        "delete a schedule for good (its name may be used again)",
        "flowforge schedule delete nightly",
        "flowforge.cli.schedules:delete",
        (flags.SCHEDULE_NAME,),
    ),
)

LIMIT_ACTIONS = (
    Command(
        "set",
        "at most N tasks of TYPE run at once",
        "flowforge limit set extract 2\n  at most 2 extract tasks run at once",
        "flowforge.cli.limits:set_limit",
        (flags.TASK_TYPE, flags.MAX_RUNNING),
    ),
    Command(
        "unset",
        "remove the limit on TYPE (tasks' own max_running still apply)",
        "flowforge limit unset extract",
        "flowforge.cli.limits:unset_limit",
        (flags.TASK_TYPE,),
    ),
    Command(
        "list",
        "every limited task type, its limit and how many of its tasks run",
        "flowforge limit list\n  TYPE     LIMIT  RUNNING  CHANGED               BY",
        "flowforge.cli.limits:list_limits",
        (flags.JSON,),
    ),
)

COMMANDS = (
    Command(
        "submit",
        "validate a workflow and start a run; prints the run id",
        """\
        flowforge submit examples/fan_out.toml --input rows=8 --idempotency-key nightly-01
          3f2a6c1e-...
        flowforge submit examples/fan_out.toml --in 10m     # or --at 2026-01-31T12:00Z
        """,
        "flowforge.cli.runs:submit",
        (
            flags.WORKFLOW,
            flags.INPUT,
            flags.IDEMPOTENCY_KEY,
            flags.START_AT,
            flags.START_IN,
            flags.JSON,
        ),
        description="Validate a workflow (a .toml/.json file or module:attr) and start a "
        "run. With --idempotency-key, a second submit returns the first run instead of "
        "creating another. Processes (flowforge scheduler/publisher/worker) run it. With "
        "--at or --in the run stays pending, none of its tasks dispatched, until its "
        "start time by the database's clock (a TIME without an offset is this machine's "
        "local time).",
    ),
    Command(
        "run",
        "submit a workflow and run it here to the end, with live progress",
        """\
        flowforge run examples/fan_out.toml --tasks examples.tasks --workers 3 --input rows=8
        """,
        "flowforge.cli.runs:run",
        (
            flags.RESUME,
            replace(flags.WORKFLOW, nargs="?"),
            flags.WORKERS,
            flags.TASKS,
            flags.INPUT,
            flags.IDEMPOTENCY_KEY,
            flags.TIMEOUT,
            flags.GRACE,
            flags.ALL_RUNS,
            flags.METRICS_PORT,
        ),
        description="Submit a workflow and run the scheduler, the publisher and N workers "
        "in this process until the run finishes (--resume RUN: run an existing run "
        "instead). Dispatch is in-process unless a broker is configured. Only this run is "
        "run; other runs in the database are left alone (--all: also every other run "
        "whose task types all have a handler here). Exits 0 "
        "if the run succeeded, 1 with the failed tasks' errors. --timeout or a first "
        "Ctrl-C stops, letting the tasks in hand finish for up to --grace seconds; a "
        "second Ctrl-C stops at once.",
    ),
    Command(
        "rerun",
        "start a new run of a finished run, carrying over what succeeded",
        """\
        flowforge rerun 3f2a --tasks examples.tasks              # what did not succeed
        flowforge rerun 3f2a --from enrich --tasks examples.tasks  # enrich and after
        """,
        "flowforge.cli.runs:rerun",
        (
            flags.RUN,
            flags.FROM_TASKS,
            flags.TASKS,
            flags.DETACH,
            flags.WORKERS,
            flags.IDEMPOTENCY_KEY,
            flags.TIMEOUT,
            flags.GRACE,
        ),
        description="Start a new run of a finished run's workflow and inputs, linked to "
        "it. A task that succeeded is not run again (its result is carried over, and the "
        "audit log says from which run, task run and attempt) unless it is named with "
        "--from or is downstream of one; every other task runs again. Then run it here "
        "to the end, as `run --resume` does (same output and exit codes), or only "
        "create it with --detach.",
    ),
    Command(
        "demo",
        "run the example fan-out/fan-in DAG end to end, then show its history",
        "flowforge demo",
        "flowforge.cli.runs:demo",
        (flags.WORKERS, flags.GRACE),
        description="Run the example DAG (extract -> clean, enrich, score -> load; enrich "
        "fails once and succeeds on retry) with in-process dispatch, then print its "
        "history and the commands that inspect it. The run stays in the database (the "
        "embedded default .flowforge/flowforge.db unless FLOWFORGE_DATABASE_URL is set), "
        "where `flowforge runs` finds it.",
        uses_broker=False,  # the demo always dispatches in-process
    ),
    Command(
        "worker",
        "consume dispatches and run task handlers (needs a broker)",
        "FLOWFORGE_BROKER_URL=amqp://guest:guest@localhost:5672/%2F "
        "flowforge worker --tasks examples.tasks --concurrency 4",
        "flowforge.cli.processes:worker",
        (
            replace(flags.TASKS, required=True),
            flags.TYPES,
            flags.CONCURRENCY,
            flags.BATCH,
            flags.WORKER_ID,
            flags.WORKER_GRACE,
            flags.METRICS_PORT,
        ),
        log_level="INFO",
        description="A worker process: claims dispatched tasks and runs their handlers "
        "(imported with --tasks). It consumes only the queues of the task types it has "
        "handlers for (or of --types), so a dispatch reaches only a worker that can run "
        "it. On SIGTERM/SIGINT it lets the task in hand finish for --grace seconds, then "
        "exits.",
    ),
    Command(
        "scheduler",
        "advance runs, schedule retries, reap expired leases and fire cron schedules",
        "flowforge scheduler --interval 0.5",
        "flowforge.cli.processes:scheduler",
        (flags.SCHEDULER_INTERVAL, flags.METRICS_PORT),
        log_level="INFO",
    ),
    Command(
        "publisher",
        "publish the outbox's dispatches to the broker (needs a broker)",
        "flowforge publisher --batch-size 500 --interval 0.2",
        "flowforge.cli.processes:publisher",
        (flags.BATCH_SIZE, flags.PUBLISHER_INTERVAL, flags.METRICS_PORT),
        log_level="INFO",
    ),
    Command(
        "runs",
        "list recent runs with their state and duration",
        "flowforge runs --limit 5",
        "flowforge.cli.inspect:runs",
        (flags.LIMIT, flags.JSON),
    ),
    Command(
        "status",
        "a run's tasks with state, attempt, duration and error",
        "flowforge status 3f2a --watch",
        "flowforge.cli.inspect:status",
        (flags.RUN, flags.WATCH, flags.JSON),
        description="A run's tasks with state, attempt, duration and error. Exits 1 if "
        "the run failed or was cancelled; --watch follows it until it finishes.",
    ),
    Command(
        "history",
        "the audit log: every transition of every attempt",
        "flowforge history 3f2a            # a run and all its tasks\n"
        "flowforge history 3f2a/enrich     # one task run (or its id)",
        "flowforge.cli.inspect:history",
        (flags.RUN_OR_TASK_RUN, flags.JSON),
    ),
    Command(
        "cancel",
        "cancel a pending or running run and its unfinished tasks",
        "flowforge cancel 3f2a",
        "flowforge.cli.runs:cancel",
        (flags.RUN,),
    ),
    Command(
        "why",
        "explain why a task is not running (or did not run)",
        """\
        flowforge why 3f2a/load
          load is waiting for 1 upstream task: enrich (retrying, attempt 2 due at 12:03:05)
        flowforge why 3f2a/load --at 2026-01-31T12:03:00Z    # as of a past moment
        """,
        "flowforge.cli.inspect:why",
        (flags.TASK_RUN, flags.AT, flags.JSON),
        description="Explain a task run's state: the upstream tasks it waits on, a retry "
        "backoff, a dispatch not yet published or claimed, the worker holding its lease, "
        "the run's end that cancelled it. --at answers from the event log as of a past "
        "moment.",
    ),
    Command(
        "ui",
        "serve the web UI: runs, a run's DAG and timeline at any moment, its tasks",
        """\
        flowforge ui --port 8765
          serving FlowForge's UI on http://127.0.0.1:8765/ (Ctrl-C stops)
        """,
        "flowforge.cli.ui:serve",
        (flags.HOST, flags.PORT, flags.METRICS_PORT),
        description="Serve server-rendered pages (docs/ui.md): the runs, a run's DAG and "
        "timeline now or as of any past moment (replayed from the audit log), a task's "
        "attempts and why; cancel a run. Loopback only unless FLOWFORGE_UI_TOKEN is set: "
        "then any --host may be given and every request must carry the token.",
        log_level="INFO",
        uses_broker=False,
    ),
)

#: The commands' positional arguments, named as their metavar's meaning, not as a flag.
_POSITIONALS = frozenset(
    flag.names[0]
    for command in (*COMMANDS, *SCHEDULE_ACTIONS)
    for flag in command.flags
    if not flag.names[0].startswith("-")
)
