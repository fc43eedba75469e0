"""``flowforge limit set|unset|list``: an operator's concurrency limits on task types.

Each change is an event of the type's ``TaskTypeLimit`` (who and when are in the audit
log, ``flowforge history``); the semantics are in docs/scheduling/limits.md.
"""

from __future__ import annotations

import argparse
import getpass

from flowforge import errors, timefmt
from flowforge.aggregates import task_type_limit
from flowforge.cli import common, render


def set_limit(args: argparse.Namespace) -> int:
    task_type = task_type_limit.checked_task_type(args.task_type)
    max_running = _whole_number(args.max_running)
    with common.open_app(common.settings_from(args)) as app:
        changed = app.set_task_type_limit(task_type, max_running, actor=_actor())
    if not changed:
        raise errors.TransactionConflictError(
            f"another change of {task_type}'s limit won the race; see `flowforge limit list`"
        )
    tasks = "task runs" if max_running == 1 else "tasks run"
    print(f"at most {max_running} {task_type} {tasks} at once")
    return 0


def unset_limit(args: argparse.Namespace) -> int:
    task_type = task_type_limit.checked_task_type(args.task_type)
    with common.open_app(common.settings_from(args)) as app:
        changed = app.unset_task_type_limit(task_type, actor=_actor())
    if changed:
        print(f"no limit on {task_type} tasks (a task's own max_running still applies)")
    else:
        print(f"{task_type} had no limit set")
    return 0


def list_limits(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        limits = app.task_type_limits()
    if args.json:
        print(
            render.to_json(
                [
                    {
                        "task_type": limit.task_type,
                        "max_running": limit.max_running,
                        "running": limit.running,
                        "changed_at": timefmt.iso(limit.changed_at) if limit.changed_at else None,
                        "changed_by": limit.changed_by,
                    }
                    for limit in limits
                ]
            )
        )
        return 0
    if not limits:
        print("no limits: set one with `flowforge limit set TYPE N`")
        return 0
    rows = [
        [
            limit.task_type,
            "-" if limit.max_running is None else str(limit.max_running),
            str(limit.running),
            "-" if limit.changed_at is None else timefmt.iso(limit.changed_at),
            limit.changed_by or "-",
        ]
        for limit in limits
    ]
    for line in render.table(("TYPE", "LIMIT", "RUNNING", "CHANGED", "BY"), rows):
        print(line)
    return 0


def _whole_number(text: str) -> int:
    """N as given on the command line: a whole number, checked like the API's."""
    try:
        value = int(text)
    except ValueError:
        raise errors.InvalidLimitError(
            f"a limit must be a whole number >= 1, got {text!r}"
        ) from None
    return task_type_limit.checked_max_running(value)


def _actor() -> str:
    """Who changed a limit, for the audit log: the operator's login name."""
    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container)
        return "user"
