"""A run as it was at a past moment, replayed from its audit log (pure).

The same entries and the same fold as ``flowforge why --at`` (``FlowForge.run_history``
folded by ``app/as_of.py``): each task's state and attempt as of a time is the target of
its last transition at or before it; a task with none did not exist yet. Attempts are
the spans from a claim (a transition into ``running``) to the transition out of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from flowforge.app import as_of
from flowforge.app.results import AuditEntry


@dataclass(frozen=True, slots=True)
class TaskAsOf:
    state: str
    attempt: int


@dataclass(frozen=True, slots=True)
class TimelineBar:
    """One attempt of one task: claimed at ``start``; ``end`` and ``outcome`` are
    ``None`` while it runs (as of the moment shown)."""

    task_key: str
    attempt: int
    start: datetime
    end: datetime | None
    outcome: str | None
    worker: str | None
    #: The error the attempt ended with (a failure, a time-out, a lost worker).
    error: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """A task waiting to be claimed: from entering ``kind`` (``ready``, or
    ``retrying``: a retry's back-off) to its next claim (``end``), or still waiting."""

    task_key: str
    kind: str
    start: datetime
    end: datetime | None


def task_states(history: Sequence[AuditEntry], at: datetime | None = None) -> dict[str, TaskAsOf]:
    """Each task's state and attempt as of ``at`` (``None``: the log's end), by key."""
    return {
        e.task_key: TaskAsOf(e.target, e.attempt or 1)
        for e in as_of.fold(history, at).tasks
        if e.task_key is not None
    }


def run_state(history: Sequence[AuditEntry], at: datetime | None = None) -> str | None:
    """The run's own state as of ``at``; ``None`` before it was created."""
    run = as_of.fold(history, at).run
    return run.target if run is not None else None


def attempts(history: Sequence[AuditEntry], at: datetime | None = None) -> list[TimelineBar]:
    """Every attempt of every task as of ``at``, in the order they were claimed."""
    found: list[TimelineBar] = []
    open_: dict[str, int] = {}  # task key -> index in found of its running attempt
    for entry in as_of.fold(history, at).entries:
        key = entry.task_key
        if entry.aggregate != "TaskRun" or key is None:
            continue
        if key in open_ and entry.source == "running":
            i = open_.pop(key)
            running = found[i]
            found[i] = TimelineBar(
                key,
                running.attempt,
                running.start,
                entry.at,
                entry.target,
                running.worker,
                entry.error,
            )
        if entry.target == "running":
            open_[key] = len(found)
            found.append(
                TimelineBar(key, entry.attempt or 1, entry.at, None, None, entry.lease_owner)
            )
    return found


def waits(history: Sequence[AuditEntry], at: datetime | None = None) -> list[Wait]:
    """Every wait of every task as of ``at``: from each transition into ``ready`` or
    ``retrying`` to the claim that ended it (a retrying task's wait runs on through
    ``ready`` to its claim, as one back-off then queue)."""
    found: list[Wait] = []
    open_: dict[str, int] = {}  # task key -> index in found of its open wait
    for entry in as_of.fold(history, at).entries:
        key = entry.task_key
        if entry.aggregate != "TaskRun" or key is None:
            continue
        if entry.target in ("ready", "retrying") and key not in open_:
            open_[key] = len(found)
            found.append(Wait(key, entry.target, entry.at, None))
        elif entry.target not in ("ready", "retrying") and key in open_:
            i = open_.pop(key)
            found[i] = Wait(key, found[i].kind, found[i].start, entry.at)
    return found


def moments(history: Sequence[AuditEntry]) -> list[datetime]:
    """The distinct times of the log's transitions, in order: the slider's stops."""
    return sorted({e.at for e in history})
