"""``flowforge runs``, ``status``, ``history`` and ``why``: reading what happened.

``runs`` and ``status`` read the projected tables; ``history`` reads the event log (the
audit log); ``why`` reads both, or only the log as of a past moment (``--at``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from flowforge import errors, timefmt
from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.ids import short_id
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.app import why as explain_task
from flowforge.app.collector import collection_paused
from flowforge.app.ports import QueueProbe, QueueState
from flowforge.app.results import (
    AuditEntry,
    MappedTaskView,
    RunSummary,
    TaskRunView,
    WorkflowRunView,
)
from flowforge.app.service import FlowForge
from flowforge.cli import common, ids, mapped_lines, render
from flowforge.cli import summary as summary_view
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
        recent: list[tuple[WorkflowRunView, dict[str, int]]] = []  # nothing ran here yet
    else:
        with common.open_app(settings) as app:
            recent = [(run, app.run_task_counts(run)) for run in app.recent_runs(args.limit)]
    now = datetime.now(UTC)
    if args.json:
        print(render.to_json([run_fact(run, (), now, counts=n) for run, n in recent]))
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
            mapped_lines.counts_text(counts),
        ]
        for run, counts in recent
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
    # RUN/TASK, as `why` and `history` take it: the run's lines and that task's row.
    run_text, slash, key = args.run.partition("/")
    with common.open_app(common.settings_from(args)) as app:
        run = ids.resolve_run_brief(app, run_text)
        if slash and not args.watch:
            counts = app.run_summary(run.id, per_state=1).counts
            task = ids.task_of_run(app, run, key)
            return _print_one_task(run, task, counts, as_json=args.json)
        if args.watch:
            run = _watch(app, run.id, quiet=args.json)
        if args.state or args.limit is not None or args.after:
            _print_page(app, run, args)
            return _status_code(run)
        summary = app.run_summary(run.id)
        whole = args.all_tasks or args.json or summary.total <= summary_view.SMALL_RUN
        # A run with elements, or a small one, is read whole: its mapped tasks are in
        # its definition (one without elements yet has no row to show it by).
        if whole or app.mapped_task_counts(run.id):
            run = app.get_workflow_run(run.id)
        tasks = render.task_order(run, app.task_runs(run.id)) if whole else []
        maps = app.mapped_tasks(run) if run.definition.get("tasks") else []
    now = datetime.now(UTC)
    if args.json:
        mapped_facts = [dataclasses.asdict(view) for view in maps]
        print(
            render.to_json(
                {
                    **run_fact(run, tasks, now),
                    "tasks": [task_fact(t) for t in tasks],
                    "mapped_tasks": mapped_facts,
                }
            )
        )
    elif args.watch:
        pass
    elif whole:
        _print_status(run, tasks, now, maps, every=args.all_tasks)
    else:
        _print_summary(run, summary, now, args.run, maps)
    return _status_code(run)


def _print_one_task(
    run: WorkflowRunView, task: TaskRunView, counts: Mapping[str, int], *, as_json: bool
) -> int:
    """``status RUN/TASK``: the run's lines (its tasks counted) and that task's row."""
    now = datetime.now(UTC)
    if as_json:
        fact = run_fact(run, [task], now, counts=counts)
        print(render.to_json({**fact, "tasks": [task_fact(task)]}))
        return _status_code(run)
    _print_run_lines(run, now)
    print(f"  tasks: {summary_view.counts_line(counts)}\n")
    for line in render.table(render.TASK_HEADERS, render.task_rows([task], now), fit=render.WIDTH):
        print(line)
    if failed := render.failure_lines([task]):
        print("\nerror (the full traceback: --json, or `flowforge history`):")
        for line in failed:
            print(f"  {line}")
    return _status_code(run)


def _status_code(run: WorkflowRunView) -> int:
    return EXIT_FAILED if run.state in ("failed", "cancelled") else 0


def _print_page(app: FlowForge, run: WorkflowRunView, args: argparse.Namespace) -> None:
    """``--state``, ``--limit``, ``--after``: one page of the run's tasks in key order."""
    limit = args.limit if args.limit is not None else summary_view.PAGE
    page = app.task_runs_page(run.id, state=args.state, after=args.after or "", limit=limit)
    counts = app.run_summary(run.id, per_state=1).counts
    now = datetime.now(UTC)
    if args.json:
        fact = run_fact(run, [], now, counts=counts)
        more = page[-1].task_key if len(page) == limit else None
        print(render.to_json({**fact, "tasks": [task_fact(t) for t in page], "next_after": more}))
        return
    _print_run_lines(run, now)
    print(f"  tasks: {summary_view.counts_line(counts)}\n")
    which = f"{args.state} tasks" if args.state else "tasks"
    after = f" after {args.after}" if args.after else ""
    print(f"{which}{after}, in key order:")
    for line in render.table(render.TASK_HEADERS, render.task_rows(page, now), fit=render.WIDTH):
        print(line)
    print(summary_view.page_hint(args.run, args.state, limit, page))


def _print_summary(
    run: WorkflowRunView,
    summary: RunSummary,
    now: datetime,
    run_text: str,
    maps: Sequence[MappedTaskView],
) -> None:
    _print_run_lines(run, now)
    print(f"  tasks: {summary_view.counts_line(summary.counts)}")
    for view in maps:
        print(f"  {mapped_lines.view_line(view)}")
    for line in summary_view.sections(summary, now):
        print(line)
    for line in summary_view.more_lines(run_text, summary):
        print(line)


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


def _print_run_lines(run: WorkflowRunView, now: datetime) -> None:
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


def _print_status(
    run: WorkflowRunView,
    tasks: Sequence[TaskRunView],
    now: datetime,
    maps: Sequence[MappedTaskView] = (),
    *,
    every: bool = False,
) -> None:
    _print_run_lines(run, now)
    print(f"  tasks: {render.counts(tasks)}")
    for view in maps:  # each mapped task's elements in one line (all of them: --all)
        print(f"  {mapped_lines.view_line(view)}")
    print()
    listed = tasks if every else mapped_lines.split(tasks)[0]
    for line in render.table(render.TASK_HEADERS, render.task_rows(listed, now), fit=render.WIDTH):
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
    since = parse_time(args.since, "--since") if args.since is not None else None
    with common.open_app(common.settings_from(args)) as app:
        target = ids.resolve_any(app, args.id)
        if args.task_key is not None:
            target = _task_of(app, target, args.task_key)
        if isinstance(target, WorkflowRunView):
            entries: Iterator[AuditEntry] = app.stream_run_history(
                target.id, since=since, limit=args.history_limit
            )
            total = app.run_history_count(target.id)
            title = f"run {short_id(target.id)} ({target.workflow_name}, {target.state})"
        else:
            found = [e for e in app.history(target.id) if since is None or e.at >= since]
            entries, total = iter(found[: args.history_limit]), target.version
            title = f"task run {short_id(target.id)} ({target.task_key}, {target.state})"
        # A big run's history decodes an event per line: no cyclic collections meanwhile.
        with collection_paused():
            _print_history(entries, title, total, since, args)
    return 0


def _print_history(
    entries: Iterator[AuditEntry],
    title: str,
    total: int,
    since: datetime | None,
    args: argparse.Namespace,
) -> None:
    if args.json:
        _print_json_stream(entries)
        return
    print(f"history of {title}: {total} transitions{_narrowed(since, args.history_limit)}")
    # A mapped task's elements taking one transition in a row: one line (all: --json).
    for line in render.history_stream(mapped_lines.collapsed_history(entries)):
        print(line)


def _task_of(app: FlowForge, target: WorkflowRunView | TaskRunView, key: str) -> TaskRunView:
    """``history RUN --task KEY``: the run's task KEY."""
    if not isinstance(target, WorkflowRunView):
        raise UsageError("--task KEY names a task of a run: give the run, or RUN/KEY alone")
    return ids.task_of_run(app, target, key)


def _narrowed(since: datetime | None, limit: int | None) -> str:
    parts = ([f"since {timefmt.iso(since)}"] if since else []) + (
        [f"at most {limit}"] if limit is not None else []
    )
    return f"; showing those {', '.join(parts)}" if parts else ""


def _print_json_stream(entries: Iterator[AuditEntry]) -> None:
    """A JSON array written an entry at a time, as the entries are read: an entry a line."""
    print("[", end="")
    for i, entry in enumerate(entries):
        print(("," if i else "") + "\n" + render.to_json_line(entry), end="")
    print("\n]")


def why(args: argparse.Namespace) -> int:
    at = parse_time(args.at) if args.at is not None else None
    settings = common.settings_from(args)
    with common.open_app(settings) as app:
        mapped_answer = _why_mapped_task(app, args.task, at)
        if mapped_answer is not None:
            headline, details = mapped_answer["headline"], mapped_answer["details"]
            return _print_explanation(mapped_answer, headline, details, as_json=args.json)
        task = ids.resolve_task(app, args.task)
        explanation = explain_task.why(
            app, task.id, at, embedded=settings.embedded, queues=_queue_probe(settings, app)
        )
    headline, details = explanation.headline, explanation.details
    return _print_explanation(explanation, headline, details, as_json=args.json)


def _print_explanation(answer: Any, headline: str, details: list[str], *, as_json: bool) -> int:
    if as_json:
        print(render.to_json(answer))
        return 0
    print(headline)
    for line in details:
        print(f"  {line}")
    return 0


def _why_mapped_task(app: FlowForge, text: str, at: datetime | None) -> dict[str, Any] | None:
    """``why RUN/process`` of a mapped task (``map_over``), which has no row of its own:
    what it waits for, or its elements counted by state, now or as of ``at``; None for
    any other task."""
    run_text, slash, key = text.partition("/")
    if not slash or "[" in key:
        return None
    run = ids.resolve_run_brief(app, run_text)
    if app.task_run_by_key(run.id, key) is not None:
        return None
    if at is not None:
        view = explain_task.mapped_tasks_as_of(app, run.id, [key], at).get(key)
    else:
        full = app.get_workflow_run(run.id)
        view = next((v for v in app.mapped_tasks(full) if v.key == key), None)
    if view is None:
        return None
    details = [
        f"{key} is mapped over {view.map_over}: one task run per element of its list, "
        f"{key}[0], {key}[1], ...",
    ]
    if view.elements:
        details.append(f"ask `flowforge why {run.id}/{key}[N]` about one element")
    return {
        "workflow_run_id": run.id,
        "task_key": key,
        "state": view.state,
        "reason": "waiting_for_mapped_list" if view.elements is None else "mapped_task",
        "headline": mapped_lines.view_line(view),
        "details": [*details, *([f"as of {timefmt.iso(at)} (the event log)"] if at else [])],
        "mapped": dataclasses.asdict(view),
    }


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


def parse_time(text: str, flag: str = "--at") -> datetime:
    """``--at`` (or ``flag``): ISO 8601 (``timefmt.parse_iso``)."""
    try:
        return timefmt.parse_iso(text)
    except ValueError:
        raise UsageError(
            f"{flag} {text!r} is not an ISO 8601 time; write e.g. {timefmt.ISO_EXAMPLE}"
        ) from None


# --- JSON shapes ---------------------------------------------------------------------------


def run_fact(
    run: WorkflowRunView,
    tasks: Sequence[TaskRunView],
    now: datetime,
    *,
    counts: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A run as ``--json`` shows it: its declared shown fields, and what they imply
    (its tasks by state: from ``tasks``, or ``counts`` when only a page was read)."""
    if counts is None:
        counts = {
            state: sum(t.state == state for t in tasks) for state in {t.state for t in tasks}
        }
    return {
        "run_id": run.id,
        **workflow_run.DECLARATION.shown_values(run),
        "created_at": run.created_at,
        "duration_s": _seconds(run.started_at, run.finished_at, now),
        "task_states": {state: counts[state] for state in sorted(counts)},
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
