"""Concurrency limits from the application service: an operator's limits on task types
(``flowforge limit set|unset|list``), and what holds a ready task back (``why``).

The rule and its guarantee are in docs/scheduling/limits.md; the writes in
``projections/writes/concurrency_limits.py``; the pure rule in ``aggregates/task_type_limit.py``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from flowforge import errors
from flowforge.aggregates import task_type_limit
from flowforge.aggregates.task_run import ACTOR_USER
from flowforge.app.core import ServiceCore
from flowforge.app.results import TaskRunView

#: How long a change of a limit keeps trying to take ``task_runs``' lock.
CHANGE_DEADLINE_SECONDS = 30.0
_MAX_PAUSE_SECONDS = 0.5

T = TypeVar("T")


def retrying_lock_waits(
    attempt: Callable[[], T],
    what: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt()`` (one transaction), tried again while it gives up its bounded wait
    for ``task_runs``' lock (each try holds claims and finishes back 100 ms at most;
    docs/scheduling/limits.md, "The lock a change takes"), for up to
    ``CHANGE_DEADLINE_SECONDS``; then ``TransactionConflictError`` saying ``what``
    could not be done (nothing was written)."""
    deadline, pause = clock() + CHANGE_DEADLINE_SECONDS, 0.01
    while True:
        try:
            return attempt()
        except errors.TransactionConflictError as exc:
            if clock() >= deadline:
                raise errors.TransactionConflictError(
                    f"{what} within {CHANGE_DEADLINE_SECONDS:.0f} s: writes of task_runs "
                    f"kept its lock ({exc}); nothing was written; try again"
                ) from exc
            sleep(random.uniform(0, pause))
            pause = min(pause * 2, _MAX_PAUSE_SECONDS)


@dataclass(frozen=True, slots=True)
class TaskTypeLimitView:
    """A task type's counter row: the operator's limit (``None``: none, only tasks' own
    ``max_running`` limit it), how many of its tasks hold a slot, and the last change."""

    task_type: str
    max_running: int | None
    running: int
    changed_at: datetime | None
    changed_by: str | None


@dataclass(frozen=True, slots=True)
class Hold:
    """What holds a ready task's dispatch: the limit (``"type"`` or ``"run"``), its
    value for this task, how many hold its slots, and since when."""

    held_by: str
    limit: int
    running: int
    held_at: datetime


class Limits:
    """The limits' part of the application service."""

    def __init__(
        self,
        core: ServiceCore,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._sleep, self._clock = sleep, clock

    def set_task_type_limit(
        self, task_type: str, max_running: int, *, actor: str = ACTOR_USER
    ) -> bool:
        """At most ``max_running`` tasks of ``task_type`` run at once, from the next
        claim on (running tasks are not stopped); recorded as an event of the type's
        ``TaskTypeLimit`` with ``actor``. False if a concurrent change won the race.
        ``InvalidLimitError`` for a bad type or number, before any I/O."""
        task_type = task_type_limit.checked_task_type(task_type)
        max_running = task_type_limit.checked_max_running(max_running)
        return self._change(task_type, max_running, actor)

    def unset_task_type_limit(self, task_type: str, *, actor: str = ACTOR_USER) -> bool:
        """Remove the operator's limit on ``task_type`` (tasks' own ``max_running``
        still apply); False if it had none."""
        return self._change(task_type_limit.checked_task_type(task_type), None, actor)

    def task_type_limits(self) -> list[TaskTypeLimitView]:
        """Every task type with a counter: a limit set, or tasks that limit it."""
        with self._core.reads() as reads:
            rows = reads.task_type_limits()
        return [
            TaskTypeLimitView(
                row["task_type"],
                row["max_running"],
                int(row["running"]),
                row["changed_at"],
                row["changed_by"],
            )
            for row in rows
        ]

    def hold_of(self, task: TaskRunView) -> Hold | None:
        """What holds ``task`` back, if a limit refused its last claim and it is still
        ready; ``None`` otherwise."""
        if task.state != "ready":
            return None
        with self._core.reads() as reads:
            held = reads.held_dispatch(task.id)
            if held is None:
                return None
            if held["held_by"] == "run":
                counter = reads.run_limit(task.workflow_run_id)
                limit = None if counter is None else counter["max_running"]
            else:
                counter = reads.task_type_limit(task.task_type)
                limit = task_type_limit.effective_limit(
                    [None if counter is None else counter["max_running"], task.max_running]
                )
        if counter is None or limit is None:
            return None
        return Hold(held["held_by"], int(limit), int(counter["running"]), held["held_at"])

    def _change(self, task_type: str, max_running: int | None, actor: str) -> bool:
        """The change, tried again while its bounded wait for ``task_runs``' lock gives
        way to a long write (:func:`retrying_lock_waits`)."""

        def attempt() -> bool:
            with self._core.writes() as writes:
                at = writes.now()
                return writes.limits.change(task_type, max_running, at=at, actor=actor)

        return retrying_lock_waits(
            attempt,
            f"the limit of {task_type} could not be changed",
            sleep=self._sleep,
            clock=self._clock,
        )
