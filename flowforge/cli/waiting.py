"""What a run that stands still is waiting for: the progress line "waiting: ...".

A run whose tasks do not move (none running, nothing changing) leaves a user staring at
``pending`` with no idea why. The sentence is ``flowforge why``'s headline for the task
that holds the run up (:mod:`flowforge.app.why`), not a second explainer that could come
to say something else.

It is cheap on purpose, because the display polls every 0.1 s: nothing is worked out
while the run moves, only once it has stood still for :data:`QUIET_S`, and then again
at most every :data:`REFRESH_S` (an explanation reads the run's audit log).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.why import Explanation

#: Seconds a run must stand still before its wait is worked out: a moving run has none,
#: and a change the next poll shows would make the line flicker.
QUIET_S = 1.0
#: Seconds between two workings-out while the run stands still, so that the times in
#: the sentence ("published 3.0s ago") stay about right.
REFRESH_S = 2.0

#: Which task says what a still run waits for, first match first: a lease that expired
#: (an abandoned attempt), then a dispatch no worker has taken, a retry's backoff, a
#: retry not yet scheduled, and last a promotion not yet made.
_ORDER = ("running", "ready", "retrying", "failed", "pending")


@dataclass(frozen=True, slots=True)
class Wait:
    """What the run waits for."""

    #: Stable while the same task waits for the same reason (the plain log prints the
    #: line again only when this changes, not each time its times do).
    key: tuple[str, str]
    #: "waiting: " and the explanation's headline.
    text: str


def held_up_by(tasks: Sequence[TaskRunView], now: datetime) -> TaskRunView | None:
    """The task whose explanation says what the run waits for; ``None`` while a task
    runs on a live lease (the run is busy, not waiting) or none is left to run."""
    if any(t.state == "running" and not _expired(t, now) for t in tasks):
        return None
    for state in _ORDER:
        for task in tasks:
            if task.state == state and (state != "failed" or task.attempt < task.max_attempts):
                return task
    return None


def _expired(task: TaskRunView, now: datetime) -> bool:
    # The display's clock, not the database's: a line a second early or late is harmless.
    return task.lease_expires_at is not None and task.lease_expires_at < now


def wait_of(explanation: Explanation) -> Wait:
    return Wait((explanation.task_key, explanation.reason), f"waiting: {explanation.headline}")


class Waiting:
    """Follows one run's snapshots and says, once it stands still, what it waits for.

    ``explain`` explains a task run (``flowforge why``'s :func:`~flowforge.app.why.why`
    on the run's database); ``clock`` is monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        explain: Callable[[UUID], Explanation],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._explain = explain
        self._clock = clock
        self._seen: tuple[object, ...] = ()
        self._still_since = clock()
        self._worked_out_at: float | None = None
        self._wait: Wait | None = None

    def update(self, run: WorkflowRunView, tasks: Sequence[TaskRunView]) -> Wait | None:
        """What the run waits for now, or ``None`` (it moves, or has not stood still
        for long enough, or it ended)."""
        now = self._clock()
        seen = (run.state, *((t.task_key, t.state, t.attempt, t.version) for t in tasks))
        if seen != self._seen or run.finished_at is not None:
            self._seen, self._still_since = seen, now
            self._worked_out_at, self._wait = None, None
            return None
        if now - self._still_since < QUIET_S:
            return None
        if self._worked_out_at is None or now - self._worked_out_at >= REFRESH_S:
            self._worked_out_at = now
            task = held_up_by(tasks, datetime.now(UTC))
            explanation = None if task is None else self._explain(task.id)
            # A task that turns out to be running on a live lease: the run moves.
            if explanation is None or explanation.reason == "running":
                self._wait = None
            else:
                self._wait = wait_of(explanation)
        return self._wait
