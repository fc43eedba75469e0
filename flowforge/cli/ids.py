"""Finding a run or a task run from what a user types: a full id, its short form (the
last 8 hex digits, which FlowForge prints: ``b7e5d3f0``), any unique start or end of one
of at least 4 hex digits, or ``RUN/TASK_KEY`` for a task of a run (``b7e5d3f0/enrich``).
The run lookup is ``flowforge/app/ids.py``'s (the web UI uses it too).
"""

from __future__ import annotations

import difflib

from flowforge import errors
from flowforge.app.ids import full_id as _full_id
from flowforge.app.ids import matches_id as _matches
from flowforge.app.ids import one as _one
from flowforge.app.ids import recent_runs as _recent_runs
from flowforge.app.ids import resolve_run, resolve_run_brief
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.cli.parser import UsageError

__all__ = ["resolve_any", "resolve_run", "resolve_run_brief", "resolve_task"]


def resolve_task(app: FlowForge, text: str) -> TaskRunView:
    if "/" in text:
        run_text, _, key = text.partition("/")
        return task_of_run(app, resolve_run_brief(app, run_text), key)
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
        # A task run of an archived run: say where its run went.
        app.raise_if_task_archived(lambda task_id: _matches(task_id, text))
    return _one(matches, text, "task run", "list a run's tasks with `flowforge status RUN`")


def task_of_run(app: FlowForge, run: WorkflowRunView, key: str) -> TaskRunView:
    """The run's task ``key``, read by its key (never the run's every task)."""
    task = app.task_run_by_key(run.id, key)
    if task is None:
        keys = [t.task_key for t in app.task_runs_page(run.id, limit=_KEYS_COMPARED)]
        near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise errors.UnknownTaskRunError(
            f"run {run.id} has no task {key!r} ({hint}tasks: {_some_keys(app, run)})"
        )
    return task


#: How many of a run's task keys a mistyped one is compared with (the first, by key).
_KEYS_COMPARED = 1000


#: How many of a run's task keys an error names.
_KEYS_SHOWN = 10


def _some_keys(app: FlowForge, run: WorkflowRunView) -> str:
    """``a, b, c`` or, for a bigger run, its first keys and how to list them all."""
    page = app.task_runs_page(run.id, limit=_KEYS_SHOWN + 1)
    keys = ", ".join(t.task_key for t in page[:_KEYS_SHOWN])
    if len(page) <= _KEYS_SHOWN:
        return keys
    return f"{keys}, ...; `flowforge status {run.id} --all` lists them all"


def _refuse_a_run(app: FlowForge, text: str) -> None:
    """A run's id where a task run's is wanted: name the run's tasks to ask about."""
    try:
        run = resolve_run_brief(app, text)
    except (errors.UnknownRunError, errors.InvalidIdError):
        return
    first = app.task_runs_page(run.id, limit=1)
    raise UsageError(
        f"{text!r} is a run ({run.workflow_name}), not a task run: name one of its tasks, "
        f"as {text}/{first[0].task_key if first else 'TASK'} (tasks: {_some_keys(app, run)})"
    )


def resolve_any(app: FlowForge, text: str) -> WorkflowRunView | TaskRunView:
    """A run if ``text`` names one, else a task run."""
    if "/" in text:
        return resolve_task(app, text)
    try:
        return resolve_run_brief(app, text)
    except errors.UnknownRunError:
        pass  # not a run: perhaps a task run
    try:
        return resolve_task(app, text)
    except errors.UnknownRunError:
        raise errors.UnknownRunError(
            f"no workflow run or task run has the id {text!r}; list runs with "
            f"`flowforge runs` and a run's tasks with `flowforge status RUN`"
        ) from None
