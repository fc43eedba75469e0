"""How the CLI shows values: tables, task lines and JSON; times and durations are
written by ``flowforge.timefmt``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID

from flowforge import timefmt
from flowforge.aggregates import cancel_cause, failures, mapping
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.ids import short_id
from flowforge.app.results import AuditEntry, TaskRunView, WorkflowRunView

#: The width a table's lines keep to (a terminal's default).
WIDTH = 80
#: A last column is never cut narrower than this to keep a table in ``WIDTH``.
MIN_LAST_COLUMN = 16


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, fit: int | None = None
) -> list[str]:
    """Left-aligned columns, two spaces apart; the last column is not padded. With
    ``fit``, the last column's values are shortened so that each line keeps to ``fit``
    characters (to no less than ``MIN_LAST_COLUMN``); the whole values are in --json."""
    cells = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    if fit is not None:
        room = max(fit - sum(widths) - 2 * len(widths), MIN_LAST_COLUMN)
        for row in cells[1:]:
            row[-1] = failures.shorten(row[-1], room)
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    ]


def took(run: WorkflowRunView, now: datetime) -> str:
    """How long a run took, the same wherever it is shown (``run``'s last line,
    ``status``): from its submission to its end (or now), then how long it ran (from its
    first claim): ``12.2s (0.21s running)``. A run that waited for a worker took long
    and ran briefly; the two figures say which."""
    total = timefmt.span(run.created_at, run.finished_at, now)
    if run.started_at is None:
        return f"{total} (never started)"
    return f"{total} ({timefmt.span(run.started_at, run.finished_at, now)} running)"


def task_order(run: WorkflowRunView, tasks: Sequence[TaskRunView]) -> list[TaskRunView]:
    """The run's tasks in the definition's dependency order: the DAG read top down."""
    order = WorkflowDefinition.model_validate(run.definition).topological_order()
    rank = {key: i for i, key in enumerate(order)}
    # A mapped task's elements where the mapped task stands, in index order.
    return sorted(
        tasks,
        key=lambda t: (rank.get(mapping.mapped_task_of(t.task_key), len(rank)), t.map_index or 0),
    )


def error_line(error: dict[str, str] | None) -> str:
    return failures.summary(error)


#: A result in a table cell: enough to recognise it; the whole value is in --json.
RESULT_CELL = 40


def outcome_cell(task: TaskRunView) -> str:
    """A failed or retrying task's error, a succeeded task's result."""
    if task.state in ("failed", "retrying"):
        return error_line(task.error)
    if task.state == "succeeded" and task.result is not None:
        return failures.short_value(task.result, RESULT_CELL)
    return ""


def failure_lines(tasks: Sequence[TaskRunView]) -> list[str]:
    """For each failed or retrying task: its error and where it was raised."""
    lines: list[str] = []
    for t in tasks:
        if t.state in ("failed", "retrying") and t.error:
            attempt = t.attempt - 1 if t.state == "retrying" else t.attempt
            lines.append(f"{t.task_key}, attempt {attempt}: {error_line(t.error)}")
            lines.extend(f"  at {frame}" for frame in failures.last_frames(t.error))
    return lines


def rerun_note(run: WorkflowRunView) -> str:
    """How a rerun names the run it reruns."""
    return f"rerun of {run.rerun_of}"


def start_note(run: WorkflowRunView, now: datetime) -> str | None:
    """When a delayed run that has not started yet starts (``now``: this machine's
    clock, good enough for a display; the database's decides); ``None`` for any other."""
    if run.state != "pending" or run.start_at is None:
        return None
    when = f"starts at {timefmt.iso(run.start_at)}"
    if run.start_at > now:
        return f"{when} (in {timefmt.duration((run.start_at - now).total_seconds())})"
    return f"{when} (due: a scheduler starts it on its next pass)"


def carried_over_lines(tasks: Sequence[TaskRunView]) -> list[str]:
    """For each task whose result was carried over: the run and attempt that produced
    it (the task run's id is in --json and `flowforge history`)."""
    return [
        f"{t.task_key}: from run {t.carried_from_run_id}, attempt {t.carried_from_attempt}"
        for t in tasks
        if t.carried_from_run_id is not None
    ]


def state_cell(task: TaskRunView) -> str:
    """The task's state; a cancel caused by another task's failure names it:
    ``cancelled (upstream_failed: b1)``, ``cancelled (run failed when b1 failed)``."""
    cause = cancel_cause.cause_of(task.error) if task.state == "cancelled" else None
    return f"cancelled ({cause.short()})" if cause else task.state


def task_rows(tasks: Sequence[TaskRunView], now: datetime) -> list[list[str]]:
    return [
        [
            t.task_key,
            state_cell(t),
            f"{t.attempt}/{t.max_attempts}",
            timefmt.span(t.started_at, t.finished_at, now),
            t.lease_owner or ("carried over" if t.carried_from_run_id is not None else ""),
            outcome_cell(t),
        ]
        for t in tasks
    ]


TASK_HEADERS = ("TASK", "STATE", "ATTEMPT", "TIME", "WORKER", "RESULT OR ERROR")


def counts(tasks: Sequence[TaskRunView]) -> str:
    """``3 succeeded, 1 running, 1 pending``, in a fixed order of states."""
    order = ("succeeded", "running", "ready", "retrying", "pending", "failed", "cancelled")
    by_state = {state: sum(t.state == state for t in tasks) for state in order}
    return ", ".join(f"{n} {state}" for state, n in by_state.items() if n)


def history_lines(entries: Sequence[AuditEntry]) -> list[str]:
    """The audit log as a table that fits 80 columns: one row per transition (its time
    in full, to paste into ``why --at``; attempt/token; the edge, whose name says the
    state it leads to), and under it, indented, what it recorded (a lease, a result, an
    error), when it recorded anything."""
    return list(history_stream(entries))


def history_stream(entries: Iterable[AuditEntry], widths_from: int = 200) -> Iterator[str]:
    """:func:`history_lines`, a line at a time as ``entries`` come: the columns are as
    wide as the first ``widths_from`` entries need (all of a small run's), so the first
    line is printed before the rest is read; a later, longer cell widens its own line."""
    entries = iter(entries)
    first = list(itertools.islice(entries, widths_from))
    rows = [_history_row(e) for e in first]
    header, *lines = table(HISTORY_HEADERS, rows)
    widths = [max([len(HISTORY_HEADERS[i]), *(len(r[i]) for r in rows)]) for i in range(4)]
    yield header
    for line, entry in zip(lines, first, strict=True):
        yield line
        yield from _history_note_lines(entry)
    for entry in entries:
        cells = _history_row(entry)
        padded = [*(c.ljust(w) for c, w in zip(cells, widths, strict=False)), cells[-1]]
        yield "  ".join(padded).rstrip()
        yield from _history_note_lines(entry)


#: The widest actor a history row shows: a production worker id (``<hostname>-<8 hex>``,
#: a pod's name 30 characters and more) would push the row past 80 columns.
HISTORY_ACTOR_WIDTH = 14


def short_actor(actor: str, width: int = HISTORY_ACTOR_WIDTH) -> str:
    """``actor`` within ``width``: its start and its end (a worker id's random suffix,
    which tells two workers of one host apart) around an ellipsis; ``--json`` has it
    whole."""
    if len(actor) <= width:
        return actor
    tail = 8
    return f"{actor[: width - tail - 1]}…{actor[-tail:]}"


def _history_row(e: AuditEntry) -> list[str]:
    return [
        timefmt.iso(e.at),
        e.task_key or "(run)",
        "" if e.attempt is None else f"{e.attempt}/{e.fencing_token}",
        short_actor(e.actor),
        f"create ({e.target})" if e.source is None else e.transition,
    ]


def _history_note_lines(entry: AuditEntry) -> list[str]:
    room = WIDTH - len(HISTORY_NOTE_INDENT)
    return [f"{HISTORY_NOTE_INDENT}{failures.shorten(n, room)}" for n in _history_notes(entry)]


HISTORY_HEADERS = ("TIME", "TASK", "ATT/TOK", "ACTOR", "TRANSITION")
#: A transition's note goes under its row, past the time column.
HISTORY_NOTE_INDENT = " " * 29


def _history_notes(entry: AuditEntry) -> list[str]:
    """What a transition recorded, a line each: a failure's error, then the frame that
    raised it (each line is cut to fit; ``--json`` has the whole of both)."""
    if entry.error and entry.transition == "fail":
        frames = failures.last_frames(entry.error, 1, source=False)
        return [error_line(entry.error), *(f"at {frame}" for frame in frames)]
    cause = cancel_cause.cause_of(entry.error) if entry.transition.startswith("cancel") else None
    if cause:  # a cancel the scheduler made because another task failed for good
        return [f"cancelled ({cause.short()})"]
    note = _history_note(entry)
    return [note] if note else []


def _history_note(entry: AuditEntry) -> str:
    if entry.transition == "succeed" and entry.result is not None:
        return f"result {failures.short_value(entry.result, RESULT_CELL)}"
    if entry.lease_expires_at is not None and entry.transition in ("claim", "renew_lease"):
        return f"lease until {timefmt.iso(entry.lease_expires_at)}"
    if entry.retry_due_at is not None and entry.transition == "schedule_retry":
        return f"retry due {timefmt.iso(entry.retry_due_at)}"
    if entry.transition == "reap_lease":
        return f"lost its worker ({entry.worker_losses} so far): lease expired, ready again"
    if entry.start_at is not None and entry.transition == "create":
        return f"starts at {timefmt.iso(entry.start_at)}"
    return _rerun_history_note(entry)


def _rerun_history_note(entry: AuditEntry) -> str:
    """A rerun's creation names the run it reruns; a carry-over, where its result was
    produced."""
    if entry.carried_from_run_id is not None and entry.transition == "carry_over":
        return (
            f"from run {short_id(entry.carried_from_run_id)} task run "
            f"{_short(entry.carried_from_task_run_id)} attempt {entry.carried_from_attempt}"
        )
    if entry.rerun_of is not None:
        return f"rerun of {short_id(entry.rerun_of)}"
    return ""


def _short(full: UUID | None) -> str:
    return "?" if full is None else short_id(full)


def compact_json(value: Any) -> str:
    """One line, for a value inside a sentence: ``{"rows": 8}``."""
    return json.dumps(value, default=_json_default)


def to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default, indent=2, sort_keys=False)


def to_json_line(value: Any) -> str:
    """A dataclass (an audit entry) as one line of compact JSON: its fields read as they
    are, not deep-copied (``dataclasses.asdict``), and written by the json module's C
    encoder, which an indented dump never uses (``history --json`` of a big run: an
    entry per line)."""
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    return json.dumps({name: getattr(value, name) for name in names}, default=_json_default)


#: Each dataclass's field names, once (``dataclasses.fields`` builds its tuple per call).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return timefmt.iso(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot show a {type(value).__name__} as JSON")


def inspect_commands(run_id: UUID, program: str, task_key: str) -> list[str]:
    """The commands that inspect a run afterwards, ready to paste (``program`` is the
    ``flowforge`` command with whatever options find the same database)."""
    return [
        f"{program} status {short_id(run_id)}",
        f"{program} history {short_id(run_id)}",
        f"{program} why {short_id(run_id)}/{task_key}",
    ]
