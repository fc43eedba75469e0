"""Finding a run from what a user types: a full id, its short form (the last 8 hex
digits, which FlowForge prints: ``b7e5d3f0``), or any unique start or end of one of at
least 4 hex digits. Shared by the command line (``flowforge/cli/ids.py``) and the web UI.

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
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge

PREFIX_SCAN_RUNS = 1000
MIN_PREFIX = 4
_PREFIX = re.compile(r"^[0-9a-f-]+$")
_Row = TypeVar("_Row", WorkflowRunView, TaskRunView)


def resolve_run(app: FlowForge, text: str) -> WorkflowRunView:
    """The run ``text`` names; :class:`~flowforge.errors.UnknownRunError` if none does,
    :class:`~flowforge.errors.InvalidIdError` if it is no id or names several."""
    full = full_id(text)
    if full is not None:
        return app.get_workflow_run(full)
    matches = [run for run in recent_runs(app, text) if matches_id(run.id, text)]
    if not matches:
        app.raise_if_archived(text)  # a short id of an archived run: say where it went
    return one(matches, text, "workflow run", "list runs with `flowforge runs`")


def resolve_run_brief(app: FlowForge, text: str) -> WorkflowRunView:
    """:func:`resolve_run`, the run read without its definition's tasks
    (``FlowForge.get_workflow_run_brief``), matched by id alone: at any run size."""
    full = full_id(text)
    if full is None:
        check_partial_id(text)
        ids = [i for i in app.recent_run_ids(PREFIX_SCAN_RUNS) if matches_id(i, text)]
        if not ids:
            app.raise_if_archived(text)  # a short id of an archived run: say where it went
        full = one_id(ids, text)
    return app.get_workflow_run_brief(full)


def one_id(ids: list[UUID], text: str) -> UUID:
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise errors.UnknownRunError(
            f"no workflow run has an id starting or ending with {text!r}; list runs with "
            f"`flowforge runs`"
        )
    raise errors.InvalidIdError(
        f"{text!r} matches {len(ids)} workflow runs ({', '.join(map(str, ids[:5]))}); give "
        f"more of the id, or its short form (its last {SHORT_ID_DIGITS} hex digits)"
    )


def full_id(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def recent_runs(app: FlowForge, text: str) -> list[WorkflowRunView]:
    """The runs a partial id is matched against; refuses text that is no partial id."""
    check_partial_id(text)
    return app.recent_runs(PREFIX_SCAN_RUNS)


def check_partial_id(text: str) -> None:
    """Refuses text that is no partial id."""
    prefix = text.lower()
    if len(prefix.replace("-", "")) < MIN_PREFIX or not _PREFIX.match(prefix):
        raise errors.InvalidIdError(
            f"{text!r} is not an id: give a full id, its short form (the 8 hex digits "
            f"FlowForge prints, e.g. b7e5d3f0), or at least {MIN_PREFIX} of its first or "
            f"last hex digits"
        )


def matches_id(candidate: UUID, text: str) -> bool:
    """``text`` is the start or the end of the id (with or without its hyphens)."""
    part = text.lower()
    full, digits = str(candidate), candidate.hex
    return any(s.startswith(part) or s.endswith(part) for s in (full, digits))


def one(matches: list[_Row], text: str, what: str, hint: str) -> _Row:
    if len(matches) == 1:
        return matches[0]
    if not matches:
        kind = errors.UnknownTaskRunError if what == "task run" else errors.UnknownRunError
        raise kind(f"no {what} has an id starting or ending with {text!r}; {hint}")
    shown = ", ".join(str(m.id) for m in matches[:5])
    raise errors.InvalidIdError(
        f"{text!r} matches {len(matches)} {what}s ({shown}); give more of the id, or its "
        f"short form (its last {SHORT_ID_DIGITS} hex digits)"
    )
