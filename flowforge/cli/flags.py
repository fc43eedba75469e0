"""The command line's flags as data: each one defined once, bounded, and given to
argparse by one function (:func:`add`).

A command lists the flags it takes (``flowforge/cli/parser.py``); a flag two commands
share is the same :class:`Flag`, so its help and bounds cannot drift apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from flowforge.bounds import MAX_BATCH, MAX_ROWS
from flowforge.cli import start_times
from flowforge.cli.logs import FORMATS, LEVELS


@dataclass(frozen=True, slots=True)
class Flag:
    """One argument of a command: its names, its help, and only the options it sets
    (``None``: argparse's own default)."""

    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    action: str | None = None
    nargs: str | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False
    #: Given once per value (``action="append"``), collected in a list (default: empty).
    repeatable: bool = False
    #: The attribute it is stored under (``None``: argparse's, from its first long name).
    dest: str | None = None


class _Adds(Protocol):
    """A parser or an argument group: what :func:`add` gives flags to."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def add(parser: _Adds, flags: Iterable[Flag]) -> None:
    """Give each flag to ``parser``, in order (the order ``--help`` shows them in)."""
    for flag in flags:
        options: dict[str, Any] = {
            "help": flag.help,
            "metavar": flag.metavar,
            "type": flag.type,
            "default": flag.default,
            "action": flag.action,
            "nargs": flag.nargs,
            "choices": flag.choices,
            "dest": flag.dest,
        }
        if flag.repeatable:
            options.update(action="append", default=[])  # a list of its own per parser
        if flag.required:
            options["required"] = True
        parser.add_argument(
            *flag.names, **{name: value for name, value in options.items() if value is not None}
        )


# Every number a user gives is bounded here, before anything runs: past these a value
# is a typo, and unbounded ones overflow a thread's wait or a database parameter.
#: Workers in one process (threads); scale further with more processes.
MAX_WORKERS = 256
#: Seconds between a process's passes.
MAX_INTERVAL_S = 3600.0
#: Seconds `scheduler --redispatch-after` may take (a day).
MAX_REDISPATCH_AFTER_S = 24 * 3600.0
#: Seconds `run --timeout` may wait (a week).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: How long a stop of `run` or `demo` waits for the tasks in hand (flowforge/cli/stopping.py).
STOP_GRACE_S = 5.0


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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


# --- configuration: every command takes these (parser.global_options) ----------------

DATABASE_URL = Flag(
    ("--database-url",),
    metavar="URL",
    help="overrides FLOWFORGE_DATABASE_URL (default: sqlite:///.flowforge/flowforge.db)",
)
BROKER_URL = Flag(
    ("--broker-url",),
    metavar="URL",
    help="overrides FLOWFORGE_BROKER_URL (default: none; embedded, in-process dispatch)",
)
LOG_LEVEL = Flag(
    ("--log-level",),
    type=str.upper,
    choices=LEVELS,
    help="log to stderr from this level (default: INFO for scheduler, publisher and "
    "worker; WARNING otherwise)",
)
LOG_FORMAT = Flag(
    ("--log-format",),
    type=str.lower,
    choices=FORMATS,
    help="text (one line a record: time, level, logger, message, key=value fields) or "
    "json (one JSON object a line) (default: text)",
)

# --- the commands' own --------------------------------------------------------------

WORKFLOW = Flag(
    ("workflow",),
    metavar="FILE|module:attr",
    help="a .toml or .json workflow file, or package.module:attribute naming a definition",
)
INPUT = Flag(
    ("-i", "--input"),
    repeatable=True,
    metavar="KEY=VALUE",
    help="a run input (repeatable, each KEY once). A VALUE that looks like JSON (starts "
    'with { [ or ", is true/false/null or a number) must be valid JSON; anything else '
    "is a string: rows=8 is a number, day=2026-01-31 a string (default: no inputs)",
)
IDEMPOTENCY_KEY = Flag(
    ("--idempotency-key",),
    metavar="KEY",
    help="a second submit with the same KEY returns the first run and creates nothing "
    "(default: none; every submit creates a run)",
)
JSON = Flag(("--json",), action="store_true", help="print JSON for scripts")
TASKS = Flag(
    ("--tasks",),
    repeatable=True,
    metavar="MODULE",
    help="import MODULE so its @task handlers are registered (repeatable)",
)
TYPES = Flag(
    ("--types",),
    repeatable=True,
    metavar="TYPE",
    help="consume only the queues of these task types, each with a handler from --tasks "
    "(repeatable; default: every type the --tasks modules register)",
)
WORKERS = Flag(
    ("--workers",),
    type=_whole_number(MAX_WORKERS),
    default=2,
    metavar="N",
    help="workers run in this process (default: 2)",
)
GRACE = Flag(
    ("--grace",),
    type=_grace_seconds,
    default=STOP_GRACE_S,
    metavar="S",
    help="on a stop, how long the tasks in hand may take to finish before they are "
    "abandoned; a second Ctrl-C ends the wait at once (default: %(default)s)",
)
ALL_RUNS = Flag(
    ("--all",),
    action="store_true",
    help="also run every other unfinished run in the database that this process has all "
    "the handlers for (default: only this run)",
)
#: A worker's stop grace: long enough for most handlers to finish their task.
WORKER_STOP_GRACE_S = 30.0
WORKER_GRACE = replace(
    GRACE,
    default=WORKER_STOP_GRACE_S,
    help="on SIGTERM/SIGINT, how long the tasks in hand may take to finish; then the "
    "worker exits without acking them (the broker redelivers them, the fencing token "
    "makes that safe) (default: %(default)s)",
)
RESUME = Flag(
    ("--resume",),
    metavar="RUN",
    help="run an existing run (id or short id) to the end instead of submitting one",
)
TIMEOUT = Flag(
    ("--timeout",),
    type=_seconds(MAX_TIMEOUT_S),
    metavar="S",
    help="stop after S seconds (the tasks in hand then get --grace seconds to finish) "
    "(default: wait until the run finishes)",
)
CONCURRENCY = Flag(
    ("--concurrency",),
    type=_whole_number(MAX_WORKERS),
    default=1,
    metavar="N",
    help="workers in this process, sharing one stop signal (default: 1)",
)
BATCH = Flag(
    ("--batch",),
    type=_whole_number(MAX_BATCH),
    default=1,
    metavar="N",
    help="dispatches each worker takes at once when they are waiting: claimed in one "
    "transaction, their outcomes written in one; handlers still run one at a time "
    "(default: 1; docs/worker.md, 'Batches')",
)
WORKER_ID = Flag(
    ("--worker-id",),
    metavar="ID",
    help="the worker's name in the audit log and the logs; with --concurrency N, "
    "ID-1 ... ID-N (default: <hostname>-<random>)",
)
SCHEDULER_INTERVAL = Flag(
    ("--interval",),
    type=_seconds(MAX_INTERVAL_S),
    default=1.0,
    metavar="S",
    help="seconds between passes (default: 1.0)",
)
REDISPATCH_AFTER = Flag(
    ("--redispatch-after",),
    type=_seconds(MAX_REDISPATCH_AFTER_S),
    default=300.0,
    metavar="S",
    help="seconds a ready task's published dispatch waits before the redispatch net "
    "may replace it, and only if its queue holds fewer messages than tasks waiting "
    "(lost: dead-lettered, purged); a task merely waiting is never redispatched "
    "(default: 300)",
)
BATCH_SIZE = Flag(
    ("--batch-size",),
    type=_whole_number(MAX_ROWS),
    default=500,
    metavar="N",
    help="dispatches published per transaction, at most (default: 500)",
)
PUBLISHER_INTERVAL = Flag(
    ("--interval",),
    type=_seconds(MAX_INTERVAL_S),
    default=0.2,
    metavar="S",
    help="seconds to wait after a sweep that found nothing (default: 0.2)",
)
LIMIT = Flag(
    ("--limit",),
    type=_whole_number(MAX_ROWS),
    default=20,
    metavar="N",
    help="show the N most recent runs (default: 20)",
)
RUN = Flag(("run",), metavar="RUN", help="a run's id or short id (its last 8 hex digits)")
TASK_TYPE = Flag(("task_type",), metavar="TYPE", help="a task type (a plain identifier)")
# Checked by the command (InvalidLimitError: one line, exit 2), as the Python API checks it.
MAX_RUNNING = Flag(("max_running",), metavar="N", help="at most N of its tasks run at once")
FROM_TASKS = Flag(
    ("--from",),
    repeatable=True,
    metavar="TASK",
    dest="from_tasks",  # "from" is a Python keyword: args.from would not parse
    help="run TASK again, and every task downstream of it, even if they succeeded "
    "(repeatable; default: run again every task that did not succeed)",
)
DETACH = Flag(
    ("--detach",),
    action="store_true",
    help="only create the new run and print its id; the deployment's scheduler, "
    "publisher and workers run it (default: run it here to the end, as run --resume)",
)
WATCH = Flag(("--watch",), action="store_true", help="follow until the run finishes")
RUN_OR_TASK_RUN = Flag(("id",), metavar="RUN|TASK_RUN", help="an id, short id or RUN/TASK_KEY")
TASK_RUN = Flag(("task",), metavar="TASK_RUN", help="a task run's id, short id or RUN/TASK_KEY")
START_AT = Flag(
    ("--at",),
    type=start_times.start_time,
    metavar="TIME",
    dest="start_at",
    help="start the run at TIME, by the database's clock: ISO 8601, e.g. "
    "2026-01-31T12:03:00Z or ...+01:00; a TIME without an offset is this machine's local "
    "time; a TIME already past starts it at once (default: start at once)",
)
START_IN = Flag(
    ("--in",),
    type=start_times.delay,
    metavar="DURATION",
    dest="start_in",  # "in" is a Python keyword: args.in would not parse
    help="start the run DURATION after its creation, by the database's clock, e.g. 90s, "
    "10m, 2h or 1h30m (default: start at once)",
)
AT = Flag(
    ("--at",),
    metavar="TIME",
    help="ISO 8601 time (UTC unless it carries an offset), e.g. 2026-01-31T12:03:00Z",
)

# --- the web UI (flowforge ui; docs/ui.md) -----------------------------------------------

HOST = Flag(
    ("--host",),
    default="127.0.0.1",
    metavar="HOST",
    help="the address to serve on (default: 127.0.0.1); any other than loopback needs "
    "FLOWFORGE_UI_TOKEN",
)
PORT = Flag(
    ("--port",),
    type=_whole_number(65535),
    default=8765,
    metavar="PORT",
    help="the port to serve on (default: 8765)",
)
METRICS_PORT = Flag(
    ("--metrics-port",),
    type=_whole_number(65535),
    metavar="PORT",
    help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (docs/observability.md) "
    "(default: none, not served)",
)

# --- cron schedules (flowforge schedule; docs/scheduling/cron.md) -------------------------

SCHEDULE_NAME = Flag(
    ("name",),
    metavar="NAME",
    help="the schedule's name: letters, digits, _ . - or :",
)
CRON = Flag(
    ("--cron",),
    required=True,
    metavar="EXPR",
    help='a cron expression: "minute hour day-of-month month day-of-week", e.g. '
    '"30 2 * * *" (every day at 02:30); a sixth, leading field is seconds; or @hourly, '
    "@daily, @weekly, @monthly, @yearly",
)
TIMEZONE = Flag(
    ("--timezone",),
    default="UTC",
    metavar="TZ",
    help="the IANA time zone the expression is read in, DST included, e.g. Europe/Paris "
    "(default: UTC)",
)
CATCH_UP = Flag(
    ("--catch-up",),
    type=_count,
    default=0,
    metavar="N",
    help="after a scheduler downtime, also run up to N missed fire times (the newest N, "
    "oldest first) besides the latest (default: 0: run once, for the latest)",
)
