"""Finding a run or a task run from what a user types: a full id, its short form (the
last 8 hex digits, which FlowForge prints: ``b7e5d3f0``), any unique start or end of one
of at least 4 hex digits, or ``RUN/TASK_KEY`` for a task of a run (``b7e5d3f0/enrich``).

Ids are time-ordered (``aggregates/ids.py``): their first digits are their creation
time, shared by the ids made within the same few minutes, so the short form is their
random end, as unique in practice as git's short hashes. Partial ids are matched against
the most recent :data:`PREFIX_SCAN_RUNS` runs and their tasks (the tables have no index
for them); a full id always works.
"""

from __future__ import annotations

import re
from typing import TypeVar
from uuid import UUID

from flowforge import errors
from flowforge.aggregates.ids import SHORT_ID_DIGITS
from flowforge.app.service import FlowForge
from flowforge.cli.parser import UsageError
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow

PREFIX_SCAN_RUNS = 1000
MIN_PREFIX = 4
_PREFIX = re.compile(r"^[0-9a-f-]+$")
_Row = TypeVar("_Row", WorkflowRunRow, TaskRunRow)


def resolve_run(app: FlowForge, text: str) -> WorkflowRunRow:
    full = _full_id(text)
    if full is not None:
        return app.get_workflow_run(full)
    matches = [run for run in _recent_runs(app, text) if _matches(run.id, text)]
    return _one(matches, text, "workflow run", "list runs with `flowforge runs`")


def resolve_task(app: FlowForge, text: str) -> TaskRunRow:
    if "/" in text:
        run_text, _, key = text.partition("/")
        run = resolve_run(app, run_text)
        tasks = app.task_runs(run.id)
        for task in tasks:
            if task.task_key == key:
                return task
        raise errors.UnknownTaskRunError(
            f"run {run.id} has no task {key!r} (tasks: {', '.join(t.task_key for t in tasks)})"
        )
    full = _full_id(text)
    if full is not None:
        try:
            return app.get_task_run(full)
        except errors.UnknownRunError:
            _refuse_a_run(app, text)
            raise
    matches = [
        task
        for run in _recent_runs(app, text)
        for task in app.task_runs(run.id)
        if _matches(task.id, text)
    ]
    if not matches:
        _refuse_a_run(app, text)
    return _one(matches, text, "task run", "list a run's tasks with `flowforge status RUN`")


def _refuse_a_run(app: FlowForge, text: str) -> None:
    """A run's id where a task run's is wanted: name the run's tasks to ask about."""
    try:
        run = resolve_run(app, text)
    except (errors.UnknownRunError, UsageError):
        return
    keys = [t.task_key for t in app.task_runs(run.id)]
    raise UsageError(
        f"{text!r} is a run ({run.workflow_name}), not a task run: name one of its tasks, "
        f"as {text}/{keys[0] if keys else 'TASK'} (tasks: {', '.join(keys)})"
    )


def resolve_any(app: FlowForge, text: str) -> WorkflowRunRow | TaskRunRow:
    """A run if ``text`` names one, else a task run."""
    if "/" in text:
        return resolve_task(app, text)
    try:
        return resolve_run(app, text)
    except errors.UnknownRunError:
        pass  # not a run: perhaps a task run
    try:
        return resolve_task(app, text)
    except errors.UnknownRunError:
        raise errors.UnknownRunError(
            f"no workflow run or task run has the id {text!r}; list runs with "
            f"`flowforge runs` and a run's tasks with `flowforge status RUN`"
        ) from None


def _full_id(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def _recent_runs(app: FlowForge, text: str) -> list[WorkflowRunRow]:
    prefix = text.lower()
    if len(prefix.replace("-", "")) < MIN_PREFIX or not _PREFIX.match(prefix):
        raise UsageError(
            f"{text!r} is not an id: give a full id, its short form (the 8 hex digits "
            f"FlowForge prints, e.g. b7e5d3f0), or at least {MIN_PREFIX} of its first or "
            f"last hex digits"
        )
    return app.recent_runs(PREFIX_SCAN_RUNS)


def _matches(candidate: UUID, text: str) -> bool:
    """``text`` is the start or the end of the id (with or without its hyphens)."""
    part = text.lower()
    full, digits = str(candidate), candidate.hex
    return any(s.startswith(part) or s.endswith(part) for s in (full, digits))


def _one(matches: list[_Row], text: str, what: str, hint: str) -> _Row:
    if len(matches) == 1:
        return matches[0]
    if not matches:
        kind = errors.UnknownTaskRunError if what == "task run" else errors.UnknownRunError
        raise kind(f"no {what} has an id starting or ending with {text!r}; {hint}")
    shown = ", ".join(str(m.id) for m in matches[:5])
    raise UsageError(
        f"{text!r} matches {len(matches)} {what}s ({shown}); give more of the id, or its "
        f"short form (its last {SHORT_ID_DIGITS} hex digits)"
    )
