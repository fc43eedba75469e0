"""``why``'s cases of a task under way: running (its lease, its timeout) and retrying
(in backoff, or due).
"""

from __future__ import annotations

from flowforge import timefmt
from flowforge.aggregates import lost_workers
from flowforge.app.why.facts import Situation
from flowforge.app.why.sentences import (
    SCHEDULER_RUNNING,
    Answer,
    ago,
    clock,
    count,
    error_text,
    iso,
    until,
    who_runs,
)


def running(s: Situation) -> Answer:
    task, key = s.task, s.task.task_key
    owner, expires = task.lease_owner or "?", task.lease_expires_at
    heartbeats = [e for e in s.task_log if e.transition == "renew_lease"]
    beat = [f"last heartbeat at {iso(heartbeats[-1].at)}"] if heartbeats else []
    if expires is not None and expires < s.at:
        return (
            "lease_expired",
            f"{key} is running on {owner}, but its lease expired at {clock(expires)} "
            f"({ago(expires, s.at)}): the reaper will reclaim it",
            [*beat, _reclaim(s, owner)],
        )
    deadline = task.deadline_at
    if deadline is not None and deadline < s.at:
        return (
            "timed_out",
            f"{key} is running on {owner} past its timeout of "
            f"{timefmt.duration(task.timeout_seconds)}: its deadline was {clock(deadline)} "
            f"({ago(deadline, s.at)}), and a scheduler fails it on its next pass",
            [
                *beat,
                f"the failure takes fencing token {task.fencing_token}'s attempt: "
                f"{owner}'s finish, if it ever comes, is stale; the retry policy applies",
                who_runs(s, SCHEDULER_RUNNING),
            ],
        )
    return (
        "running",
        f"{key} is running: attempt {task.attempt} of {task.max_attempts} on {owner}, "
        f"lease held until {clock(expires)} ({until(expires, s.at)})",
        [
            *beat,
            f"started at {iso(task.started_at)}; {_renewal(s, owner)}",
            _time_limit(s),
            *_losses_before(s),
        ],
    )


#: How many of its heartbeat's renewals a lease may miss before ``why`` stops saying the
#: heartbeat renews it (one late renewal is a busy machine; two, a worker gone).
MISSED_RENEWALS = 2


def _renewal(s: Situation, owner: str) -> str:
    """Whether the holder's heartbeat renews the lease: it renews every third of the
    lease (processes/heartbeat.py), so a lease that missed two renewals is held by a
    worker that stopped or stalled (a `flowforge run` that exited, say), and runs out."""
    task, expires = s.task, s.task.lease_expires_at
    beats = [e for e in s.task_log if e.transition in ("claim", "renew_lease")]
    if expires is None or not beats:
        return "the worker's heartbeat renews the lease"
    last = beats[-1].at
    lease = task.lease_seconds or (expires - last).total_seconds()
    interval = lease / 3
    if (s.at - last).total_seconds() <= MISSED_RENEWALS * interval:
        return "the worker's heartbeat renews the lease"
    gone = (
        f"no heartbeat since {clock(last)} ({ago(last, s.at)}; one is due every "
        f"{timefmt.duration(interval)}): {owner} has stopped or stalled, and the lease "
        f"runs out at {clock(expires)}; then the reaper makes the task ready again"
    )
    if s.embedded:
        gone += f" and `flowforge run --resume {task.workflow_run_id} --tasks MODULE` runs it"
    return gone


def _reclaim(s: Situation, owner: str) -> str:
    """What the reaper does with an expired lease: below the task's bound of lost
    workers, ready again; at it, the attempt fails (docs/execution-model.md)."""
    task = s.task
    losses = task.worker_losses + 1
    bound = lost_workers.worker_losses_bound(task.max_worker_losses)
    refused = f"a late write by {owner} carries token {task.fencing_token} and is refused"
    if lost_workers.loses_for_good(losses, task.max_worker_losses):
        return (
            f"{owner} died or stalled, and the task will have lost its worker {losses} "
            f"times (max_worker_losses = {bound}): the reaper (in `flowforge scheduler`) "
            f"fails the attempt (WorkerLost) and the retry policy applies; {refused}"
        )
    return (
        f"{owner} died or stalled (lost worker {losses} of at most {bound}). The reaper "
        f"(in `flowforge scheduler`) moves the task back to ready with fencing token "
        f"{task.fencing_token + 1} and it is dispatched again; {refused}"
    )


def _losses_before(s: Situation) -> list[str]:
    """A task that lost its worker before: how often, and its bound."""
    task = s.task
    if not task.worker_losses:
        return []
    bound = lost_workers.worker_losses_bound(task.max_worker_losses)
    return [
        f"it lost its worker {count(task.worker_losses, 'time')} before "
        f"(max_worker_losses = {bound}: at that many the reaper fails an attempt)"
    ]


def _time_limit(s: Situation) -> str:
    """When the attempt in hand times out; or, with no timeout, how long it has run."""
    task = s.task
    if task.deadline_at is not None:
        return (
            f"it times out at {clock(task.deadline_at)} ({until(task.deadline_at, s.at)}; "
            f"timeout {timefmt.duration(task.timeout_seconds)})"
        )
    claims = [e.at for e in s.task_log if e.transition == "claim"]
    claimed = claims[-1] if claims else task.started_at
    ran = timefmt.duration((s.at - claimed).total_seconds()) if claimed else "?"
    return (
        f"attempt {task.attempt} has run for {ran} and no timeout is set: a handler that "
        f"hangs keeps it running (set timeout_seconds on the task or the workflow)"
    )


def retrying(s: Situation) -> Answer:
    task, key = s.task, s.task.task_key
    due, failed = task.retry_due_at, error_text(task.error)
    cause = f"attempt {task.attempt - 1} failed ({failed})"
    if due is not None and due > s.at:
        return (
            "retry_backoff",
            f"{key} is in retry backoff: {cause}; attempt {task.attempt} of "
            f"{task.max_attempts} is due at {clock(due)} ({until(due, s.at)})",
            ["when it is due, a scheduler makes it ready and it is dispatched again"],
        )
    return (
        "retry_due",
        f"{key} is retrying: {cause}; attempt {task.attempt} was due at {clock(due)} "
        f"({ago(due, s.at)}): a scheduler makes it ready on its next pass",
        [who_runs(s, SCHEDULER_RUNNING)],
    )
