"""Delayed start: a run submitted with a start time waits for it (pure).

A run's ``start_at`` is fixed at its creation, from what the submitter asked and the
database's clock at that moment (``now``): an aware time is taken as it is; a duration
(``timedelta``, the CLI's ``--in``) counts from the database's now, never the client's,
so a client with a wrong clock delays by exactly what it asked. A start time that is not
later than the creation is no delay: the run is recorded without one (``None``) and
starts at once, as an undelayed run does.

A delayed run's tasks are all created ``pending`` (its first tasks too: no outbox row,
nothing dispatched); the scheduler's ``start`` edge is conditional on
``start_at <= the database's now`` (``run_move``), and once the run has started its
first tasks are promoted like any task whose dependencies are done.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from flowforge.aggregates.rules import initial_task_run_state
from flowforge.aggregates.states import TaskRunState

#: What a submitter may ask: a time, a delay from the database's now, or nothing.
StartAt = datetime | timedelta | None
#: The longest delay: a year, as the retry policy's bounds (``definition.MAX_SECONDS``; not
#: imported, so that the CLI's grammar, which checks --in, stays free of pydantic).
MAX_DELAY = timedelta(days=365)


def checked(start_at: StartAt) -> StartAt:
    """``start_at`` if it is a start time FlowForge can keep: an aware ``datetime``
    (a naive one is ambiguous: which zone?) or a ``timedelta`` of at most a year;
    ``ValueError`` naming the problem otherwise."""
    if start_at is None:
        return None
    if isinstance(start_at, datetime):
        if start_at.tzinfo is None or start_at.utcoffset() is None:
            raise ValueError(
                f"start_at must be timezone-aware (e.g. datetime(..., tzinfo=UTC)), "
                f"got the naive {start_at.isoformat()}"
            )
        return start_at
    if isinstance(start_at, timedelta):
        if not math.isfinite(start_at.total_seconds()) or start_at > MAX_DELAY:
            raise ValueError(f"start_at: a delay must be at most {MAX_DELAY}, got {start_at}")
        return start_at
    raise TypeError(
        f"start_at is a datetime (aware), a timedelta from the database's now, or None; "
        f"got {type(start_at).__name__}"
    )


def start_time(start_at: StartAt, now: datetime) -> datetime | None:
    """The start time a run created at ``now`` (the database's clock) records: ``None``
    unless it is later than ``now`` (the module's rule)."""
    at = now + start_at if isinstance(start_at, timedelta) else start_at
    return at if at is not None and at > now else None


def waits(start_at: datetime | None, now: datetime) -> bool:
    """Whether a pending run with this ``start_at`` must not start yet at ``now``, nor any
    of its tasks be promoted (``task_move``'s run condition, whoever asks)."""
    return start_at is not None and now < start_at


def initial_state(dependency_count: int, start_at: datetime | None) -> TaskRunState:
    """A task's state at its run's creation: ``pending`` for every task of a delayed
    run, else the usual rule (``ready`` without dependencies)."""
    return held_until_start(initial_task_run_state(dependency_count), start_at)


def held_until_start(state: TaskRunState, start_at: datetime | None) -> TaskRunState:
    """The state a task planned to start in ``state`` is created in by a run with this
    start time: ``pending`` if the run is delayed (nothing is dispatched before it)."""
    return TaskRunState.PENDING if start_at is not None else state
