"""``flowforge runs``, ``status``, ``history`` and ``why``: reading what happened.

``runs`` and ``status`` read the projected tables; ``history`` reads the event log (the
audit log); ``why`` reads both, or only the log as of a past moment (``--at``).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from flowforge import errors, timefmt
from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.ids import short_id
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app import why as explain_task
from flowforge.app.ports import QueueProbe, QueueState
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.cli import common, ids, render
from flowforge.cli.exits import EXIT_FAILED
from flowforge.cli.parser import UsageError
from flowforge.cli.progress import Progress
from flowforge.config import Settings

#: The least time between two redraws of ``status --watch`` for a task's transitions
#: (a run's own transition always redraws: its last one is the end).
WATCH_REDRAW_S = 0.2


def runs(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    if common.default_database_missing(settings):
        recent: list[tuple[WorkflowRunView, list[TaskRunView]]] = []  # nothing ran here yet
    else:
        with common.open_app(settings) as app:
            recent = [(run, app.task_runs(run.id)) for run in app.recent_runs(args.limit)]
    now = datetime.now(UTC)
    if args.json:
        print(render.to_json([run_fact(run, tasks, now) for run, tasks in recent]))
        return 0
    if not recent:
        print("no runs yet: start one with `flowforge run FILE` or try `flowforge demo`")
        return 0
    rows = [
        [
            short_id(run.id),
            run.workflow_name,
            run.state,
            timefmt.iso(run.created_at),
            timefmt.span(run.started_at, run.finished_at, now),
            render.counts(tasks),
        ]
        for run, tasks in recent
    ]
    header, *lines = render.table(("RUN", "WORKFLOW", "STATE", "CREATED", "TIME", "TASKS"), rows)
    print(header)
    for line, (run, _) in zip(lines, recent, strict=True):
        print(line)
        if run.rerun_of is not None:
            # A line of its own: the table's lines are already as wide as they can be.
            print(f"  {render.rerun_note(run)}")
        if note := render.start_note(run, now):
            print(f"  {note}")
    return 0


def status(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        run = ids.resolve_run(app, args.run)
        if args.watch:
            run = _watch(app, run.id, quiet=args.json)
        tasks = render.task_order(run, app.task_runs(run.id))
    now = datetime.now(UTC)
    if args.json:
        print(
            render.to_json({**run_fact(run, tasks, now), "tasks": [task_fact(t) for t in tasks]})
        )
    elif not args.watch:
        _print_status(run, tasks, now)
    return EXIT_FAILED if run.state in ("failed", "cancelled") else 0


def _watch(app: FlowForge, run_id: Any, *, quiet: bool) -> WorkflowRunView:
    """Follow a run until it is terminal; the progress goes to stderr under --json.
    It follows the feed (docs/feed.md) from before its first read, and reads the run
    again after each of the run's transitions (at most every ``WATCH_REDRAW_S``, and
    always after the run's own)."""
    progress = Progress(sys.stderr if quiet else sys.stdout)
    after = app.feed_head()  # before the read: no transition falls between them
    run = app.get_workflow_run(run_id)
    progress.update(run, app.task_runs(run_id))
    drawn = time.monotonic()
    if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        return run
    for event in app.follow(after=after, stop=threading.Event()):
        if event.run_id != run_id:
            continue
        if event.aggregate == "TaskRun" and time.monotonic() - drawn < WATCH_REDRAW_S:
            continue
        run = app.get_workflow_run(run_id)
        progress.update(run, app.task_runs(run_id))
        drawn = time.monotonic()
        if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
            break
    return run


def _print_status(run: WorkflowRunView, tasks: Sequence[TaskRunView], now: datetime) -> None:
    print(f"run {run.id}  {run.workflow_name}  {run.state}")
    print(f"  submitted {timefmt.iso(run.created_at)}  started {timefmt.iso(run.started_at)}")
    print(f"  finished  {timefmt.iso(run.finished_at)}  took {render.took(run, now)}")
    if run.inputs:
        print(f"  inputs {render.compact_json(run.inputs)}")
    if run.idempotency_key:
        print(f"  idempotency key {run.idempotency_key}")
    if run.rerun_of is not None:
        print(f"  {render.rerun_note(run)}")
    if note := render.start_note(run, now):
        print(f"  {note}")
    print(f"  tasks: {render.counts(tasks)}\n")
    for line in render.table(render.TASK_HEADERS, render.task_rows(tasks, now), fit=render.WIDTH):
        print(line)
    if carried := render.carried_over_lines(tasks):
        print("\ncarried over from an earlier run (not run again):")
        for line in carried:
            print(f"  {line}")
    if failed := render.failure_lines(tasks):
        print("\nerrors (the full tracebacks: --json, or `flowforge history`):")
        for line in failed:
            print(f"  {line}")


def history(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        target = ids.resolve_any(app, args.id)
        if isinstance(target, WorkflowRunView):
            entries = app.run_history(target.id)
            title = f"run {short_id(target.id)} ({target.workflow_name}, {target.state})"
        else:
            entries = app.history(target.id)
            title = f"task run {short_id(target.id)} ({target.task_key}, {target.state})"
    if args.json:
        print(render.to_json(entries))
        return 0
    print(f"history of {title}: {len(entries)} transitions")
    for line in render.history_lines(entries):
        print(line)
    return 0


def why(args: argparse.Namespace) -> int:
    at = parse_time(args.at) if args.at is not None else None
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        task = ids.resolve_task(app, args.task)
        explanation = explain_task.why(
            app, task.id, at, embedded=settings.embedded, queues=_queue_probe(settings, app)
        )
    if args.json:
        print(render.to_json(explanation))
        return 0
    print(explanation.headline)
    for line in explanation.details:
        print(f"  {line}")
    return 0


def _queue_probe(settings: Settings, app: FlowForge) -> QueueProbe | None:
    """Asks the deployment's broker about a task type's queue; a broker that does not
    answer leaves the explanation without it (``why`` works in an outage too)."""
    if settings.broker is None:
        return None
    broker = settings.broker.for_deployment(app.deployment_id)
    # Imported here: pika is needed only when a broker is asked.
    from flowforge.processes import rabbitmq  # noqa: PLC0415

    def probe(task_type: str) -> QueueState | None:
        try:
            return rabbitmq.queue_state(broker, task_type)
        except errors.BrokerError:
            return None

    return probe


def parse_time(text: str) -> datetime:
    """``--at``: ISO 8601 (``timefmt.parse_iso``)."""
    try:
        return timefmt.parse_iso(text)
    except ValueError:
        raise UsageError(
            f"--at {text!r} is not an ISO 8601 time; write e.g. {timefmt.ISO_EXAMPLE}"
        ) from None


# --- JSON shapes ---------------------------------------------------------------------------


def run_fact(run: WorkflowRunView, tasks: Sequence[TaskRunView], now: datetime) -> dict[str, Any]:
    """A run as ``--json`` shows it: its declared shown fields, and what they imply."""
    return {
        "run_id": run.id,
        **workflow_run.DECLARATION.shown_values(run),
        "created_at": run.created_at,
        "duration_s": _seconds(run.started_at, run.finished_at, now),
        "task_states": {
            state: sum(t.state == state for t in tasks)
            for state in sorted({t.state for t in tasks})
        },
    }


def task_fact(task: TaskRunView) -> dict[str, Any]:
    """A task run as ``--json`` shows it: its declared shown fields, and its duration."""
    return {
        "task_run_id": task.id,
        **task_run.DECLARATION.shown_values(task),
        "duration_s": _seconds(task.started_at, task.finished_at, datetime.now(UTC)),
    }


def _seconds(start: datetime | None, end: datetime | None, now: datetime) -> float | None:
    return None if start is None else round(((end or now) - start).total_seconds(), 3)
