"""The redispatch net's rule: which READY tasks get a new dispatch, and why.

A ready task whose dispatch was published waits for it in its type's queue. The
scheduler cannot see which messages the queue holds, but the broker says how many
(``QueueState.messages``). If the queue holds fewer messages than there are ready tasks
of its type whose dispatches were all published, at least that many dispatches are
gone (dead-lettered, purged, or lost with the queue): the deficit. Only then does the
net redispatch, and only the deficit's oldest stalled tasks. A backlog, however deep
and long, or a type with no worker, is a queue that holds as many messages as tasks
waiting: no deficit, no duplicate.

A deficit can also be a moment's race (a worker took a message and has not yet
committed its claim; a dispatch was confirmed between the two counts), so a task is
redispatched only once it has been a candidate on two passes or more in a row, for
``confirm_s``
(:func:`confirm_after`): a race moves on (the claim commits, the task leaves READY, the
next candidate is another task), a loss stays. docs/delivery.md, "Redispatch".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from uuid import UUID

#: The queue held fewer messages than ready tasks waiting on it: dispatches were lost
#: (dead-lettered past the delivery limit, purged, or gone with the queue).
QUEUE_SHORT: Final = "queue_short"
#: An embedded runner started: its in-process channel starts empty, so its own ready
#: tasks' dispatches died with the process that held them.
RUNNER_STARTED: Final = "runner_started"
REASONS: Final = (QUEUE_SHORT, RUNNER_STARTED)
#: The longest a candidate waits to be confirmed lost (see :func:`confirm_after`): long
#: enough for any claim in flight to commit, short beside the default period.
CONFIRM_MAX_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Tally:
    """One task type, as one pass sees it."""

    #: READY tasks of the type whose every dispatch is published (each should have a
    #: message in the queue, or in a consumer's hands for a moment).
    waiting: int
    #: Messages the broker says the type's queue holds; None if it could not be asked.
    queued: int | None
    #: The type's stalled tasks (last dispatch older than the period), oldest first.
    stalled: Sequence[UUID]


def deficit(waiting: int, queued: int | None) -> int:
    """How many dispatches are missing at least: 0 when the broker could not be asked
    (no count, no redispatch: a lost dispatch waits for the next pass that can ask)."""
    if queued is None:
        return 0
    return max(0, waiting - queued)


def confirm_after(period_s: float) -> float:
    """How long a task must stay a candidate before it is redispatched: the period, at
    most ``CONFIRM_MAX_S`` (a lost dispatch is replaced within the period plus this)."""
    return min(period_s, CONFIRM_MAX_S)


def choose(
    tally: Tally, suspects: Mapping[UUID, float], now: float, confirm_s: float
) -> tuple[list[UUID], dict[UUID, float]]:
    """(the tasks to redispatch now, the suspects to remember, each with when it was
    first a candidate): the deficit's oldest stalled tasks are this pass's candidates;
    those that were candidates on the last pass too, and since ``confirm_s`` ago or
    longer, are redispatched; the others stay (or become) suspects. A task that is no
    longer a candidate is forgotten: its suspicion starts again if it becomes one."""
    candidates = tally.stalled[: deficit(tally.waiting, tally.queued)]
    since = {task_id: suspects.get(task_id, now) for task_id in candidates}
    ripe = [t for t in candidates if t in suspects and now - since[t] >= confirm_s]
    done = set(ripe)
    return ripe, {t: at for t, at in since.items() if t not in done}
