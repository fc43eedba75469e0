"""``flowforge logs RUN TASK``: what a task's handler printed and logged, attempt by
attempt (docs/logs.md; the worker captures it: ``processes/capture.py``).

An attempt's output is stored when the attempt ends, so ``--follow`` prints each
attempt's as it is stored, and stops once the task can have no further attempt (it
succeeded or was cancelled, or its run ended).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Iterable
from uuid import UUID

from flowforge import timefmt
from flowforge.app.attempt_logs import AttemptLogView
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge
from flowforge.cli import common, ids, render

#: How often --follow looks for a newly stored attempt's output.
FOLLOW_POLL_S = 0.5
#: A task that ended so: no attempt of it is still to come.
_ENDED_TASK = frozenset({"succeeded", "cancelled"})
_ENDED_RUN = frozenset({"succeeded", "failed", "cancelled"})


def logs(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        task = _task(app, args.run, args.task)
        shown: set[int] = set()
        found = _new(app, task, args.attempt, shown)
        _print(found, args.json, follow=args.follow)
        if not args.follow:
            if not found and not args.json:
                print(_nothing(task, args.attempt))
            return 0
        while not _ended(app, task.id):
            time.sleep(FOLLOW_POLL_S)
            _print(_new(app, task, args.attempt, shown), args.json, follow=True)
        # What the last attempt stored just before its task ended.
        _print(_new(app, task, args.attempt, shown), args.json, follow=True)
    return 0


def _task(app: FlowForge, target: str, key: str | None) -> TaskRunView:
    if key is None:
        return ids.resolve_task(app, target)
    return ids.task_of_run(app, ids.resolve_run_brief(app, target), key)


def _new(
    app: FlowForge, task: TaskRunView, attempt: int | None, shown: set[int]
) -> list[AttemptLogView]:
    found = app.attempt_logs(task.id, attempt=attempt)
    new = [log for log in found if log.fencing_token not in shown]
    shown.update(log.fencing_token for log in new)
    return new


def _ended(app: FlowForge, task_run_id: UUID) -> bool:
    task = app.get_task_run(task_run_id)
    if task.state in _ENDED_TASK:
        return True
    return app.get_workflow_run_brief(task.workflow_run_id).state in _ENDED_RUN


def _print(found: Iterable[AttemptLogView], as_json: bool, *, follow: bool) -> None:
    """Each attempt's header and output; ``--json``: a JSON array of them, or with
    ``--follow`` one object per line, as each is stored."""
    if as_json and not follow:
        print(render.to_json([_fact(log) for log in found]))
        return
    for log in found:
        if as_json:
            print(render.compact_json(_fact(log)), flush=True)
            continue
        print(header(log), flush=follow)
        print(log.output, end="" if log.output.endswith("\n") else "\n", flush=follow)


def _fact(log: AttemptLogView) -> dict[str, object]:
    return {**dataclasses.asdict(log), "truncated": log.truncated}


def header(log: AttemptLogView) -> str:
    """The line above an attempt's output: within 80 columns with any worker id."""
    worker = log.worker_id if len(log.worker_id) <= 24 else "..." + log.worker_id[-21:]
    dropped = f", {log.dropped_chars:,} chars dropped" if log.truncated else ""
    return f"--- attempt {log.attempt} on {worker}, {timefmt.iso(log.written_at)}{dropped} ---"


def _nothing(task: TaskRunView, attempt: int | None) -> str:
    which = f"attempt {attempt} of {task.task_key}" if attempt else task.task_key
    return (
        f"no output stored for {which} ({task.state}, attempt {task.attempt}): an "
        f"attempt's output is stored when it ends, and only if its handler printed or "
        f"logged something"
    )
