"""What each page shows, read through the application service (``FlowForge``) only.

Each function returns a template's context; none writes. Times are the database's.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app import why
from flowforge.app.results import AuditEntry, TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.ui import layout, replay

#: The runs page filters and counts the most recent runs, at most this many.
RUNS_WINDOW = 1000
PAGE_SIZE = 50
#: The timeline draws at most this many attempts (a grouped run's first ones).
TIMELINE_ROWS = 200
TIMELINE_WIDTH = 900
TIMELINE_ROW = 18
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
    tasks = app.task_runs(run.id)
    return {
        "run": run,
        "short": short_id(run.id),
        "created": timefmt.iso(run.created_at),
        "time": timefmt.span(run.started_at, run.finished_at, datetime.now(UTC)),
        "tasks": dict(sorted(Counter(t.state for t in tasks).items())),
    }


def run_page(app: FlowForge, run: WorkflowRunView, at: datetime | None) -> dict[str, Any]:
    """A run: header, its DAG and timeline now or as of ``at`` (replayed from the log).

    A large run shown now is read from its task rows alone (one query), not from its
    audit log (every event of every task: seconds for 10,000 tasks); as of a past moment
    it needs the log."""
    rows = app.task_runs(run.id)
    if at is None and len(rows) > layout.GROUP_ABOVE:
        states = {t.task_key: replay.TaskAsOf(t.state, t.attempt) for t in rows}
        moments = sorted({m for m in (run.created_at, run.started_at, run.finished_at) if m})
        attempts = _attempts_now(rows)
        timeline = _timeline(attempts, moments, app.database_now(), run)
        run_state = run.state
    else:
        history = app.run_history(run.id)
        states = replay.task_states(history, at)
        moments = replay.moments(history)
        shown = at or app.database_now()
        timeline = _timeline(replay.attempts(history, at), [e.at for e in history], shown, run)
        run_state = replay.run_state(history, at) or "none"
    tasks = [layout.Task(t.task_key, t.depends_on) for t in _definition_order(run, rows)]
    context: dict[str, Any] = {
        "run": run,
        "short": short_id(run.id),
        "at": at,
        "at_iso": timefmt.iso(at) if at else "",
        "run_state": run_state,
        "inputs": to_json(run.inputs),
        "times": {
            "created": timefmt.iso(run.created_at),
            "started": timefmt.iso(run.started_at),
            "finished": timefmt.iso(run.finished_at),
        },
        "moments": [m.isoformat() for m in moments],
        "moment_index": _moment_index(moments, at),
        "task_ids": {t.task_key: t.id for t in rows},
        "states": states,
        "counts": dict(sorted(Counter(s.state for s in states.values()).items())),
        "task_count": len(rows),
        "timeline": timeline,
    }
    if len(tasks) > layout.GROUP_ABOVE:
        by_key = {k: s.state for k, s in states.items()}
        context["levels"] = layout.grouped(tasks, by_key)
    else:
        context["rows"] = [_task_line(t) for t in _definition_order(run, rows)]
        context["picture"] = layout.picture(tasks)
        context["box"] = {"w": layout.BOX_WIDTH, "h": layout.BOX_HEIGHT}
    return context


def _attempts_now(rows: list[TaskRunView]) -> list[replay.TimelineBar]:
    """Each task's attempt as its row has it now (a large run's page reads no log): from
    its first claim to its finish, in the order they started."""
    found = [
        replay.TimelineBar(
            t.task_key,
            t.attempt,
            t.started_at,
            t.finished_at,
            t.state if t.finished_at is not None else None,
            t.lease_owner,
        )
        for t in rows
        if t.started_at is not None
    ]
    return sorted(found, key=lambda a: a.start)


def _task_line(task: TaskRunView) -> dict[str, Any]:
    """A task as the run's table shows it now: its result or its error, shortened."""
    result = to_json(task.result) if task.result is not None else ""
    error = task.error or {}
    return {
        "task": task,
        "result": result if len(result) <= SHORT_TEXT else result[:SHORT_TEXT] + "…",
        "error": f"{error.get('type', '')}: {error.get('message', '')}" if error else "",
    }


def _definition_order(run: WorkflowRunView, rows: list[TaskRunView]) -> list[TaskRunView]:
    order = {t.get("key"): i for i, t in enumerate(run.definition.get("tasks", []))}
    return sorted(rows, key=lambda t: order.get(t.task_key, len(order)))


def _moment_index(moments: list[datetime], at: datetime | None) -> int:
    if at is None:
        return len(moments) - 1
    return max(0, sum(m <= at for m in moments) - 1)


def _timeline(
    every: list[replay.TimelineBar], times: list[datetime], at: datetime, run: WorkflowRunView
) -> dict[str, Any]:
    """Every attempt as a bar on one time axis, from the run's creation to ``at`` (the
    moment shown, or the database's now), or to its last transition (of ``times``) if it
    ended before."""
    start = min(times, default=run.created_at)
    last = max((t for t in times if t <= at), default=start)
    end = at if any(a.end is None for a in every) else last
    span = max((end - start).total_seconds(), 1e-3)

    def x(t: datetime) -> float:
        return round(TIMELINE_WIDTH * (t - start).total_seconds() / span, 1)

    bars = [
        {
            "attempt": a,
            "x": x(a.start),
            "w": max(2.0, round(x(a.end or end) - x(a.start), 1)),
            "y": i * TIMELINE_ROW,
            "state": a.outcome or "running",
            "duration": timefmt.between(a.start, a.end, missing="running"),
        }
        for i, a in enumerate(every[:TIMELINE_ROWS])
    ]
    return {
        "bars": bars,
        "shown": len(bars),
        "attempts": len(every),
        "width": TIMELINE_WIDTH,
        "height": max(1, len(bars)) * TIMELINE_ROW,
        "start": timefmt.iso(start),
        "end": timefmt.iso(end),
    }


def task_page(app: FlowForge, task_run_id: UUID, at: datetime | None) -> dict[str, Any]:
    """A task run: every attempt from its audit log, and ``why`` now and as of ``at``."""
    task = app.get_task_run(task_run_id)
    run = app.get_workflow_run(task.workflow_run_id)
    history = app.history(task_run_id)
    return {
        "task": task,
        "run": run,
        "short": short_id(run.id),
        "attempts": _attempts(history),
        "history": history,
        "result": to_json(task.result) if task.result is not None else "",
        "why_now": why.why(app, task_run_id),
        "why_then": why.why(app, task_run_id, at) if at else None,
        "at": at,
        "at_iso": timefmt.iso(at) if at else "",
    }


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
