"""What each page shows, read through the application service (``FlowForge``) only.

Each function returns a template's context; none writes. Times are the database's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app import why
from flowforge.app.results import AuditEntry, TaskOutline, TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.app.why.facts import Explanation
from flowforge.ui import layout, logs, replay, shapes, timeline

#: The runs page filters and counts the most recent runs, at most this many.
RUNS_WINDOW = 1000
PAGE_SIZE = 50
#: A result on a run's page is cut to this many characters (its task's page shows it all).
SHORT_TEXT = 200


def to_json(value: Any) -> str:
    """A value a user or a handler wrote, as indented JSON text (escaped by the template)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class RunsQuery:
    state: str = ""
    workflow: str = ""
    page: int = 1


def runs_page(app: FlowForge, query: RunsQuery) -> dict[str, Any]:
    """The recent runs, newest first: counts per state, filtered, one page of them."""
    window = app.recent_runs(RUNS_WINDOW)
    recent = [r for r in window if query.workflow in ("", r.workflow_name)]
    counts = Counter(r.state for r in recent)
    shown = [r for r in recent if query.state in ("", r.state)]
    pages = max(1, -(-len(shown) // PAGE_SIZE))
    page = min(max(1, query.page), pages)
    rows = shown[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    return {
        "runs": [_run_line(app, r) for r in rows],
        "counts": dict(sorted(counts.items())),
        "total": len(recent),
        "query": query,
        "page": page,
        "pages": pages,
        "workflows": sorted({r.workflow_name for r in window}),
        "window": RUNS_WINDOW,
    }


def _run_line(app: FlowForge, run: WorkflowRunView) -> dict[str, Any]:
    return {
        "run": run,
        "short": short_id(run.id),
        "created": timefmt.iso(run.created_at),
        "time": timefmt.span(run.started_at, run.finished_at, datetime.now(UTC)),
        "tasks": dict(sorted(app.task_counts(run.id).items())),
    }


#: A run's page lists its tasks this many a page (``?tasks=N``).
TASK_PAGE = 50
#: Live updates re-read the tasks changed this long before the last read, so that a
#: commit that took its time before the read's moment is not missed.
PATCH_OVERLAP = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class RunState:
    """What a run's page shows of its tasks, now or as of a moment."""

    states: dict[str, replay.TaskAsOf]
    attempts: list[replay.TimelineBar]
    waits: list[replay.Wait]
    moments: list[datetime]
    run_state: str


Row = TaskRunView | TaskOutline


def run_state(
    app: FlowForge, run: WorkflowRunView, rows: Sequence[Row], at: datetime | None
) -> RunState:
    """A run's tasks now or as of ``at``. A small run is replayed from its audit log. A
    large run (more than ``layout.GROUP_ABOVE`` tasks) is read from its tasks' outline
    (key, state, attempt): now, each as it is; as of a moment, a task not changed since
    is as it was then, and each task changed since is as its newest event at or before
    the moment says (``FlowForge.task_states_as_of``: one indexed query, no replay). Its
    timeline is the first ``timeline.ROWS`` tasks claimed, from their own events."""
    if len(rows) <= layout.GROUP_ABOVE:
        history = app.run_history(run.id)
        return RunState(
            replay.task_states(history, at),
            replay.attempts(history, at),
            replay.waits(history, at),
            replay.moments(history),
            replay.run_state(history, at) or "none",
        )
    # The timeline's rows: the tasks first claimed (by then), each read from its own
    # events, so every claim is its bar (a reap and a re-claim, a retry) with its waits.
    drawn = app.task_runs_first_claimed(run.id, at, timeline.ROWS)
    history = app.histories([t.id for t in drawn])
    changed = app.task_states_as_of(run.id, at) if at is not None else {}
    states = {
        t.task_key: replay.TaskAsOf(t.state, t.attempt) for t in rows if t.task_key not in changed
    }
    states.update(
        {key: replay.TaskAsOf(*then) for key, then in changed.items() if then is not None}
    )
    moments = sorted({m for m in (run.created_at, run.started_at, run.finished_at) if m})
    state = run.state if at is None else _run_then(run, at)
    return RunState(
        states, replay.attempts(history, at), replay.waits(history, at), moments, state
    )


def _run_then(run: WorkflowRunView, at: datetime) -> str:
    """A run's own state as of ``at``, from its row's times."""
    if run.created_at > at:
        return "none"
    if run.finished_at is not None and run.finished_at <= at:
        return run.state
    return "running" if run.started_at is not None and run.started_at <= at else "pending"


def _rows(app: FlowForge, run: WorkflowRunView) -> tuple[list[Row], shapes.Shape]:
    """A run's tasks in its definition's order, and its shape: a large run's in outline
    (its page of rows read by key), a small run's in full."""
    rows: list[Row] = list(app.task_outline(run.id))
    if len(rows) <= layout.GROUP_ABOVE:
        rows = list(app.task_runs(run.id))

    def build() -> shapes.Shape:  # a run's definition read whole, once
        tasks = app.get_workflow_run(run.id).definition.get("tasks", [])
        order = {t.get("key"): i for i, t in enumerate(tasks)}
        return shapes.Shape(order, layout.picture(_drawn(app, run, rows, tasks, order)))

    shape = shapes.of(run.id, len(rows), build)
    last = len(shape.order)
    return sorted(rows, key=lambda t: shape.order.get(t.task_key, last)), shape


def _drawn(
    app: FlowForge,
    run: WorkflowRunView,
    rows: list[Row],
    tasks: list[dict[str, Any]],
    order: dict[str, int],
) -> list[layout.Task]:
    """The tasks a run's graph draws, in its definition's order: the definition's own
    when its tasks are the run's (no mapped task's elements), else the rows in full."""
    if len(tasks) == len(rows) and all(k in order for k in (t.task_key for t in rows)):
        return [layout.Task(t["key"], list(t.get("depends_on", [])), t["type"]) for t in tasks]
    full = [t for t in rows if isinstance(t, TaskRunView)] or app.task_runs(run.id)
    full = sorted(full, key=lambda t: order.get(t.task_key, len(order)))
    return [layout.Task(t.task_key, t.depends_on, t.task_type) for t in full]


def run_page(
    app: FlowForge, run: WorkflowRunView, at: datetime | None, tasks_page: int = 1
) -> dict[str, Any]:
    """A run: header, its DAG, its tasks (a page of them) and timeline, now or as of
    ``at`` (``run_state`` says how each is read). ``run`` may be its brief view."""
    rows, shape = _rows(app, run)
    large = len(rows) > layout.GROUP_ABOVE
    now = app.database_now()
    seen = run_state(app, run, rows, at)
    states = seen.states
    shown_at = at or now

    def then(moment: datetime | None) -> str:
        return timefmt.iso(moment if moment is not None and moment <= shown_at else None)

    pages_of_tasks = max(1, -(-len(rows) // TASK_PAGE))
    page = min(max(1, tasks_page), pages_of_tasks)
    shown = _full(app, run, rows[(page - 1) * TASK_PAGE : page * TASK_PAGE])
    by_attempt: dict[str, list[replay.TimelineBar]] = {}
    for a in seen.attempts:
        by_attempt.setdefault(a.task_key, []).append(a)
    last = max((m for m in seen.moments if m <= shown_at), default=run.created_at)
    end = shown_at if any(a.end is None for a in seen.attempts) or at else last
    start = min(seen.moments, default=run.created_at)
    context: dict[str, Any] = {
        "run": run,
        "short": short_id(run.id),
        "at": at,
        "at_iso": timefmt.iso(at) if at else "",
        "run_state": seen.run_state,
        "inputs": to_json(run.inputs),
        "times": {"created": then(run.created_at), "started": then(run.started_at)}
        | {"finished": then(run.finished_at), "now": timefmt.iso(now)},
        "moments": [timefmt.iso(m) for m in seen.moments],
        "moment_index": _moment_index(seen.moments, at),
        "states": states,
        "counts": dict(sorted(Counter(s.state for s in states.values()).items())),
        "task_count": len(rows),
        "rows": [
            _task_line(t, states.get(t.task_key), by_attempt.get(t.task_key, [])) for t in shown
        ],
        "tasks_page": page,
        "tasks_pages": pages_of_tasks,
        "task_keys": [] if large else [t.task_key for t in rows],
        "timeline": timeline.draw(seen.attempts, seen.waits, start, max(end, start)),
        "box": {"w": layout.BOX_WIDTH, "h": layout.BOX_HEIGHT},
        "group_layer": layout.GROUP_LAYER,
        "cursor": timefmt.iso(now - PATCH_OVERLAP),
    }
    return context | _graph(app, run, rows, shape.picture, states)


def _graph(
    app: FlowForge,
    run: WorkflowRunView,
    rows: list[Row],
    picture: layout.Picture | None,
    states: dict[str, replay.TaskAsOf],
) -> dict[str, Any]:
    """The run's graph: its picture, the ids its task boxes link to, and each group
    box's counts per state (a graph too large to draw: its levels' counts)."""

    def tasks() -> list[layout.Task]:
        full = [t for t in rows if isinstance(t, TaskRunView)] or app.task_runs(run.id)
        return [layout.Task(t.task_key, t.depends_on, t.task_type) for t in full]

    small = all(isinstance(t, TaskRunView) for t in rows)
    by_key = {k: s.state for k, s in states.items()}
    boxes = picture.boxes if picture else []
    linked = [b.key for b in boxes if not b.is_group]
    return {
        "picture": picture,
        "levels": layout.grouped(tasks(), by_key) if picture is None else [],
        "task_ids": {t.task_key: t.id for t in _full(app, run, rows if small else linked)},
        "groups": {
            b.key: dict(sorted(Counter(by_key.get(k, "none") for k in b.members).items()))
            for b in boxes
            if b.is_group
        },
    }


def run_changes(app: FlowForge, run: WorkflowRunView, since: datetime | None) -> dict[str, Any]:
    """What a live run page patches (``/runs/RUN/tasks.json``): the run's state, its
    counts per state, and the tasks changed since ``since`` (each task without it)."""
    changed = app.task_outline(run.id, since)  # at any run size: the changed rows only
    now = app.database_now()
    return {
        "run_state": run.state,
        "counts": dict(sorted(app.task_counts(run.id).items())),
        "tasks": {t.task_key: {"state": t.state, "attempt": t.attempt} for t in changed},
        "cursor": timefmt.iso(now - PATCH_OVERLAP),
    }


def _full(app: FlowForge, run: WorkflowRunView, rows: Sequence[Row | str]) -> list[TaskRunView]:
    """Some tasks (rows, or keys) in full, in their order: a large run's read by key."""
    if all(isinstance(t, TaskRunView) for t in rows):
        return [t for t in rows if isinstance(t, TaskRunView)]
    keys = [t if isinstance(t, str) else t.task_key for t in rows]
    found = {t.task_key: t for t in app.task_runs_by_keys(run.id, keys)} if keys else {}
    return [found[k] for k in keys if k in found]


def _task_line(
    task: TaskRunView, then: replay.TaskAsOf | None, attempts: list[replay.TimelineBar]
) -> dict[str, Any]:
    """A task as the run's table shows it: its state (as of the moment shown), its result
    now (shortened), and each attempt with the error it ended with."""
    result = to_json(task.result) if task.result is not None else ""
    return {
        "task": task,
        "state": then.state if then else "none",
        "attempt": then.attempt if then else 0,
        "result": result if len(result) <= SHORT_TEXT else result[:SHORT_TEXT] + "…",
        "attempts": [
            {
                "attempt": a.attempt,
                "state": a.outcome or "running",
                "worker": a.worker or "",
                "error": _error_text(a.error),
            }
            for a in attempts
        ],
        "error": _error_text(task.error) if not attempts else "",
    }


def _error_text(error: dict[str, str] | None) -> str:
    return f"{error.get('type', '')}: {error.get('message', '')}" if error else ""


def _moment_index(moments: list[datetime], at: datetime | None) -> int:
    if at is None:
        return len(moments) - 1
    return max(0, sum(m <= at for m in moments) - 1)


def task_page(
    app: FlowForge, task_run_id: UUID, at: datetime | None, log: tuple[int, int] | None = None
) -> dict[str, Any]:
    """A task run: every attempt from its audit log with its captured log (a page of
    it: ``log`` is a claim's fencing token and the page of its log shown), and ``why``
    now and as of ``at``."""
    task = app.get_task_run(task_run_id)
    run = app.get_workflow_run(task.workflow_run_id)
    history = app.history(task_run_id)
    return {
        "task": task,
        "run": run,
        "short": short_id(run.id),
        "attempts": _attempts(history),
        "logs": logs.pages(app, task_run_id, *(log or (None, 1))),
        "history": history,
        "result": to_json(task.result) if task.result is not None else "",
        "why_now": _shown(why.why(app, task_run_id)),
        "why_then": _shown(why.why(app, task_run_id, at)) if at else None,
        "at": at,
        "at_iso": timefmt.iso(at) if at else "",
    }


#: A line of ``why`` on a task's page is cut to this many characters (a task waiting on
#: 50,000 others is explained by a line naming each: 1.7 MB).
WHY_LINE = 2000


def _shown(explained: Explanation) -> dict[str, Any]:
    """``why``'s headline and details, each line cut to ``WHY_LINE`` characters."""

    def cut(line: str) -> str:
        if len(line) <= WHY_LINE:
            return line
        more = len(line) - WHY_LINE
        return f"{line[:WHY_LINE]}… ({more:,} characters more: `flowforge why` prints it all)"

    return {"headline": cut(explained.headline), "details": [cut(d) for d in explained.details]}


def _attempts(history: list[AuditEntry]) -> list[dict[str, Any]]:
    """Each attempt: the claim that started it and the transition that ended it."""
    found: list[dict[str, Any]] = []
    for entry in history:
        if entry.target == "running":
            found.append({"claim": entry, "end": None})
        elif entry.source == "running" and found and found[-1]["end"] is None:
            found[-1]["end"] = entry
    for attempt in found:
        claim, end = attempt["claim"], attempt["end"]
        attempt["duration"] = timefmt.between(claim.at, end.at if end else None, "running")
        attempt["result"] = to_json(end.result) if end and end.result is not None else ""
        attempt["error"] = end.error if end else None
    return found
