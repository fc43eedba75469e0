"""The flags of a run's history at any size: reading it (``status``/``history`` pages and
filters), following it (``flowforge events``) and moving it out (``db archive``/``restore``).
Defined as :mod:`flowforge.cli.flags` defines the others, and given to argparse by its
:func:`~flowforge.cli.flags.add`."""

from __future__ import annotations

import argparse
from typing import Any

from flowforge.aggregates.states import TaskRunState
from flowforge.bounds import MAX_ROWS
from flowforge.cli.flags import Flag, _whole_number


def _age(text: str) -> Any:
    """``--finished-before``: an age (30d, 12h, 90m), refused as a usage error."""
    from flowforge import config, errors  # noqa: PLC0415 - kept off --help's imports

    try:
        return config.parse_age(text, "--finished-before")
    except errors.ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# `flowforge db archive` / `db restore` (docs/operations.md).
FINISHED_BEFORE = Flag(
    ("--finished-before",),
    type=_age,
    required=True,
    metavar="AGE",
    help="archive the runs that ended longer ago than AGE by the database's clock: "
    "30d, 12h, 1d12h, 90m",
)
ARCHIVE_TO = Flag(
    ("--to",),
    required=True,
    metavar="FILE",
    dest="archive_to",
    help="the archive file to write; if it exists, the archive it began is finished "
    "(the runs still live are deleted; nothing else changes)",
)
ARCHIVE_FILE = Flag(("file",), metavar="FILE", help="an archive file `flowforge db archive` wrote")

# --- the feed (flowforge events; docs/feed.md) ---------------------------------------
FOLLOW = Flag(
    ("--follow",),
    action="store_true",
    help="keep printing transitions as they commit, until Ctrl-C",
)
AFTER = Flag(
    ("--after",),
    metavar="POSITION",
    help="start after this feed position (the last column of a line, or --json's "
    '"position"; default: from the oldest event in the log)',
)
EVENTS_LIMIT = Flag(
    ("--limit",),
    type=_whole_number(MAX_ROWS),
    metavar="N",
    help="stop after N transitions (default: all of them; with --follow, no end)",
)

# --- one run at any size: status and history (issue #50) --------------------------------

ALL_TASKS = Flag(
    ("--all",),
    action="store_true",
    dest="all_tasks",
    help="list every task, however many (a run of more than 20 tasks shows a summary)",
)
TASK_STATE = Flag(
    ("--state",),
    choices=tuple(s.value for s in TaskRunState),
    metavar="STATE",
    help="list only the tasks in STATE (pending, ready, running, retrying, succeeded, "
    "failed, cancelled)",
)
TASK_PAGE = Flag(
    ("--limit",),
    type=_whole_number(MAX_ROWS),
    metavar="N",
    help="list at most N tasks, in key order (a page; --after KEY gives the next)",
)
AFTER_KEY = Flag(
    ("--after",),
    metavar="KEY",
    help="list the tasks after the task key KEY (the last key of the previous page)",
)
HISTORY_TASK = Flag(
    ("--task",),
    metavar="KEY",
    dest="task_key",
    help="only the transitions of the run's task KEY",
)
SINCE = Flag(
    ("--since",),
    metavar="TIME",
    help="only the transitions at or after TIME (ISO 8601, e.g. 2026-01-31T12:03:00Z)",
)
HISTORY_LIMIT = Flag(
    ("--limit",),
    type=_whole_number(MAX_ROWS),
    metavar="N",
    dest="history_limit",
    help="at most N transitions",
)

# --- flowforge logs: each attempt's captured output (issue #49) --------------------------

LOGS_TARGET = Flag(
    ("run",),
    metavar="RUN|TASK_RUN",
    help="a run's id or short id (then TASK), a task run's id, or RUN/TASK_KEY",
)
LOGS_TASK = Flag(("task",), metavar="TASK", nargs="?", help="the task's key in RUN")
ATTEMPT = Flag(
    ("--attempt",),
    type=_whole_number(MAX_ROWS),
    metavar="N",
    help="only attempt N's output (default: every attempt's)",
)
LOGS_FOLLOW = Flag(
    ("--follow",),
    action="store_true",
    help="keep printing each attempt's output as it is stored, until the task has "
    "ended (no retry left) or Ctrl-C",
)
