"""The explanation: one headline sentence and details for a situation.

:func:`explain` is pure (each case is a unit test); :func:`why` gathers the facts
(:mod:`flowforge.app.why.facts`) and explains them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from flowforge import timefmt
from flowforge.aggregates import failures, task_run
from flowforge.app.limits import Hold
from flowforge.app.ports import QueueProbe
from flowforge.app.results import AuditEntry
from flowforge.app.service import FlowForge
from flowforge.app.why.facts import (
    TERMINAL_RUN_STATES,
    Explanation,
    Situation,
    TaskView,
    situation_as_of,
    situation_now,
)

# --- the explanation ---------------------------------------------------------------------

_SCHEDULER_RUNNING = "is `flowforge scheduler` (or `flowforge run`) running against this database?"

#: (reason, headline, details) of one case.
_Answer = tuple[str, str, list[str]]
#: A time not known reads as "?" in a sentence (a duration not known is left out).
_iso = partial(timefmt.iso, missing="?")
_clock = partial(timefmt.clock, missing="?")
_ago = partial(timefmt.ago, missing="?")
_until = partial(timefmt.until, missing="?")
_seconds = partial(timefmt.between, missing="")


def why(
    app: FlowForge,
    task_run_id: UUID,
    at: datetime | None = None,
    *,
    embedded: bool = False,
    queues: QueueProbe | None = None,
) -> Explanation:
    """Explain a task run now, or as of ``at`` (from the log). ``embedded``: no broker
    is configured, so the advice names `flowforge run`, the only thing that runs tasks.
    ``queues`` asks the broker about a ready task's queue (who consumes it)."""
    if at is None:
        now = replace(situation_now(app, task_run_id), embedded=embedded)
        if queues is not None and now.task.state == "ready":
            now = replace(now, queue=queues(now.task.task_type))
        return explain(now)
    situation = situation_as_of(app, task_run_id, at)
    if situation is None:
        row = app.get_task_run(task_run_id)
        created = app.get_workflow_run(row.workflow_run_id).created_at
        return Explanation(
            task_run_id=row.id,
            workflow_run_id=row.workflow_run_id,
            task_key=row.task_key,
            state="none",
            reason="not_created",
            headline=f"{row.task_key} did not exist yet at {_iso(at)}: its run was "
            f"submitted at {_iso(created)}",
            as_of=at,
            from_log=True,
        )
    return explain(replace(situation, embedded=embedded))


def explain(s: Situation) -> Explanation:
    """The headline and details for a situation (pure)."""
    task, run = s.task, s.run
    if run.state in TERMINAL_RUN_STATES and task.state not in ("succeeded", "failed", "cancelled"):
        reason, headline, details = _leftover(s)
    else:
        reason, headline, details = _CASES[task.state](s)
    return Explanation(
        task_run_id=task.id,
        workflow_run_id=run.id,
        task_key=task.task_key,
        state=task.state,
        reason=reason,
        headline=headline,
        details=[*details, *_attempt_lines(s.task_log), *_context_lines(s)],
        as_of=s.at,
        from_log=not s.live,
        attempt=task.attempt,
        max_attempts=task.max_attempts,
        upstream=[_upstream_fact(s.siblings[k]) for k in task.depends_on if k in s.siblings],
    )


def _pending(s: Situation) -> _Answer:
    # A pending run (no task claimed yet: a claim starts it) is no reason of its own: a
    # task pending in it waits for its upstream like any other. A delayed run is: none
    # of its tasks can move before its start time.
    if s.run.state == "pending" and s.run.start_at is not None:
        return _waiting_for_start_time(s, s.run.start_at)
    task, key = s.task, s.task.task_key
    upstream = [s.siblings[k] for k in task.depends_on if k in s.siblings]
    blocking = [u for u in upstream if u.state != "succeeded"]
    if not blocking:
        return (
            "promotion_due",
            f"{key} is pending, but {_all(len(upstream))} succeeded: a scheduler makes "
            f"it ready on its next pass",
            [_who_runs(s, _SCHEDULER_RUNNING)],
        )
    dead = [u for u in blocking if u.failed_for_good or u.state == "cancelled"]
    if dead:
        return (
            "upstream_failed",
            f"{key} will not run: upstream {_count(len(dead), 'task')} "
            f"{', '.join(_phrase(u, s.at) for u in dead)}",
            [
                "a task runs only after all its upstream tasks succeed; the run fails, and "
                "the scheduler cancels what can no longer run"
            ],
        )
    done = [u.task_key for u in upstream if u.state == "succeeded"]
    return (
        "waiting_for_upstream",
        f"{key} is waiting for {_count(len(blocking), 'upstream task')}: "
        f"{', '.join(_phrase(u, s.at) for u in blocking)}",
        [
            *([f"already succeeded upstream: {', '.join(done)}"] if done else []),
            f"ask `flowforge why {s.run.id}/{blocking[0].task_key}` why "
            f"{blocking[0].task_key} is not done",
        ],
    )


def _waiting_for_start_time(s: Situation, start_at: datetime) -> _Answer:
    """A task of a delayed run that has not started (``flowforge submit --at/--in``)."""
    key, upstream = s.task.task_key, s.task.depends_on
    after = f"; then it waits for its upstream: {', '.join(upstream)}" if upstream else ""
    if start_at > s.at:
        return (
            "waiting_for_start_time",
            f"{key} is waiting for its run's start time: the run starts at "
            f"{_clock(start_at)} (in {timefmt.duration((start_at - s.at).total_seconds())})"
            f"{after}",
            [
                f"the run was submitted to start at {_iso(start_at)} (the database's "
                f"clock): until then none of its tasks is ready or dispatched; then a "
                f"scheduler starts it and makes its first tasks ready",
                f"`flowforge cancel {s.run.id}` cancels it before it starts",
            ],
        )
    return (
        "start_due",
        f"{key} is waiting for its run's start time, {_clock(start_at)} "
        f"({_ago(start_at, s.at)}): a scheduler starts the run on its next pass{after}",
        [_who_runs(s, _SCHEDULER_RUNNING)],
    )


def _ready(s: Situation) -> _Answer:
    key = s.task.task_key
    since = s.task_log[-1].at if s.task_log else s.at
    if not s.dispatches:
        return (
            "no_dispatch",
            f"{key} is ready since {_clock(since)} but has no dispatch in the outbox",
            [
                "every transition to ready writes a dispatch in the same transaction; an "
                "outbox emptied by hand would explain this"
            ],
        )
    latest = s.dispatches[-1]
    if s.hold is not None and latest.created_at < s.hold.held_at:
        return _held(s, s.hold)
    again = f" (dispatch {len(s.dispatches)} of this task)" if len(s.dispatches) > 1 else ""
    if latest.published_at is None:
        return (
            "dispatch_pending",
            f"{key} is ready; its dispatch is waiting in the outbox since "
            f"{_clock(latest.created_at)} ({_ago(latest.created_at, s.at)}): not yet "
            f"published{again}",
            [
                _who_runs(
                    s,
                    "a publisher sends outbox rows to the broker: is `flowforge publisher` "
                    "(or `flowforge run`) running against this database?",
                )
            ],
        )
    published = (
        f"its dispatch was published at {_clock(latest.published_at)} "
        f"({_ago(latest.published_at, s.at)})"
    )
    if s.queue is not None and s.queue.consumers == 0:
        return _no_consumer(s, published + again)
    consumed = (
        [
            f"queue {s.queue.queue}: {_count(s.queue.consumers, 'consumer')}, "
            f"{s.queue.messages} waiting"
        ]
        if s.queue is not None
        else []
    )
    return (
        "dispatch_published",
        f"{key} is ready; {published} and no worker has claimed it yet{again}",
        [
            *consumed,
            _who_runs(
                s,
                f"a worker that runs task type {s.task.task_type!r} claims it when it is "
                f"free: are workers running with it (`flowforge worker --tasks MODULE`), "
                f"and all busy?",
            ),
        ],
    )


def _held(s: Situation, hold: Hold) -> _Answer:
    """A ready task whose last claim a concurrency limit refused: its dispatch is held
    until a task under that limit stops running (docs/scheduling/limits.md)."""
    key, task_type = s.task.task_key, s.task.task_type
    if hold.held_by == "run":
        limit = "its run's limit (max_running_tasks)"
        frees = "a task of this run"
        see = f"`flowforge status {s.run.id}` shows which run"
    else:
        limit = f"the limit on task type {task_type!r}"
        frees = f"a {task_type} task"
        see = "`flowforge limit list` shows the type's limit (a task's own max_running "
        see += "may lower it)"
    return (
        "limit_reached",
        f"{key} is ready but held by {limit}: {hold.running} running, at most "
        f"{hold.limit} (held since {_clock(hold.held_at)}, {_ago(hold.held_at, s.at)})",
        [
            f"a claim past a concurrency limit leaves the task ready and holds its "
            f"dispatch; when {frees} stops running, its slot dispatches the oldest held "
            f"task again",
            see,
        ],
    )


def _no_consumer(s: Situation, published: str) -> _Answer:
    """A ready task whose type's queue nobody consumes: it waits there, using no attempt."""
    queue, task_type = s.queue, s.task.task_type
    assert queue is not None
    waiting = f"{queue.messages} waiting" if queue.exists else "the queue does not exist"
    return (
        "no_consumer",
        f"{s.task.task_key} is ready; {published}, and no worker is consuming queue "
        f"{queue.queue} for type {task_type}",
        [
            f"queue {queue.queue}: 0 consumers, {waiting}",
            f"start a worker with a handler for {task_type!r} (`flowforge worker --tasks "
            f"MODULE`, where MODULE has @task({task_type!r})): the dispatch waits in its "
            f"queue until then and uses no attempt",
        ],
    )


def _who_runs(s: Situation, deployed: str) -> str:
    """The advice on what moves a task on: ``deployed`` with a broker; without one,
    only a `flowforge run` does (a scheduler, publisher and workers as its threads)."""
    if not s.embedded:
        return deployed
    return (
        f"no broker is configured, so only a `flowforge run` runs tasks, in its own "
        f"process: unless one is running this run now, `flowforge run --resume "
        f"{s.run.id} --tasks MODULE` runs it here (MODULE: the module of its @task "
        f"handlers)"
    )


def _running(s: Situation) -> _Answer:
    task, key = s.task, s.task.task_key
    owner, expires = task.lease_owner or "?", task.lease_expires_at
    heartbeats = [e for e in s.task_log if e.transition == "renew_lease"]
    beat = [f"last heartbeat at {_iso(heartbeats[-1].at)}"] if heartbeats else []
    if expires is not None and expires < s.at:
        return (
            "lease_expired",
            f"{key} is running on {owner}, but its lease expired at {_clock(expires)} "
            f"({_ago(expires, s.at)}): the reaper will reclaim it",
            [
                *beat,
                f"{owner} died or stalled. The reaper (in `flowforge scheduler`) moves the "
                f"task back to ready with fencing token {task.fencing_token + 1} and it is "
                f"dispatched again; a late write by {owner} carries token "
                f"{task.fencing_token} and is refused",
            ],
        )
    deadline = task.deadline_at
    if deadline is not None and deadline < s.at:
        return (
            "timed_out",
            f"{key} is running on {owner} past its timeout of "
            f"{timefmt.duration(task.timeout_seconds)}: its deadline was {_clock(deadline)} "
            f"({_ago(deadline, s.at)}), and a scheduler fails it on its next pass",
            [
                *beat,
                f"the failure takes fencing token {task.fencing_token}'s attempt: "
                f"{owner}'s finish, if it ever comes, is stale; the retry policy applies",
                _who_runs(s, _SCHEDULER_RUNNING),
            ],
        )
    return (
        "running",
        f"{key} is running: attempt {task.attempt} of {task.max_attempts} on {owner}, "
        f"lease held until {_clock(expires)} ({_until(expires, s.at)})",
        [
            *beat,
            f"started at {_iso(task.started_at)}; the worker's heartbeat renews the lease",
            _time_limit(s),
        ],
    )


def _time_limit(s: Situation) -> str:
    """When the attempt in hand times out; or, with no timeout, how long it has run."""
    task = s.task
    if task.deadline_at is not None:
        return (
            f"it times out at {_clock(task.deadline_at)} ({_until(task.deadline_at, s.at)}; "
            f"timeout {timefmt.duration(task.timeout_seconds)})"
        )
    claims = [e.at for e in s.task_log if e.transition == "claim"]
    claimed = claims[-1] if claims else task.started_at
    ran = timefmt.duration((s.at - claimed).total_seconds()) if claimed else "?"
    return (
        f"attempt {task.attempt} has run for {ran} and no timeout is set: a handler that "
        f"hangs keeps it running (set timeout_seconds on the task or the workflow)"
    )


def _retrying(s: Situation) -> _Answer:
    task, key = s.task, s.task.task_key
    due, failed = task.retry_due_at, _error(task.error)
    cause = f"attempt {task.attempt - 1} failed ({failed})"
    if due is not None and due > s.at:
        return (
            "retry_backoff",
            f"{key} is in retry backoff: {cause}; attempt {task.attempt} of "
            f"{task.max_attempts} is due at {_clock(due)} ({_until(due, s.at)})",
            ["when it is due, a scheduler makes it ready and it is dispatched again"],
        )
    return (
        "retry_due",
        f"{key} is retrying: {cause}; attempt {task.attempt} was due at {_clock(due)} "
        f"({_ago(due, s.at)}): a scheduler makes it ready on its next pass",
        [_who_runs(s, _SCHEDULER_RUNNING)],
    )


def _failed(s: Situation) -> _Answer:
    task, key, error = s.task, s.task.task_key, _error(s.task.error)
    run_ended = s.run.state in TERMINAL_RUN_STATES
    if not task.failed_for_good and not run_ended:
        return (
            "retry_pending",
            f"{key} failed attempt {task.attempt} of {task.max_attempts} ({error}): a "
            f"scheduler schedules attempt {task.attempt + 1} after the retry policy's "
            f"backoff on its next pass",
            [],
        )
    if not task.failed_for_good:
        # A run that ended (cancelled, or failed by another task) retries nothing.
        return (
            "failed",
            f"{key} failed attempt {task.attempt} of {task.max_attempts} at "
            f"{_clock(task.finished_at)} ({error}) and is not retried: {_run_end(s)}",
            [],
        )
    return (
        "failed",
        f"{key} failed for good at {_clock(task.finished_at)} after "
        f"{_count(task.attempt, 'attempt')}: {error}",
        [f"{_run_end(s)}" if run_ended else "its run fails on a scheduler's next pass"],
    )


def _succeeded(s: Situation) -> _Answer:
    task = s.task
    if task.carried_from_run_id is not None:
        # A rerun's task that did not run: say where its result really came from.
        return (
            "succeeded",
            f"{task.task_key} did not run in this run: its result was carried over at "
            f"{_clock(task.finished_at)} from run {task.carried_from_run_id}, where task "
            f"run {task.carried_from_task_run_id} produced it on attempt "
            f"{task.carried_from_attempt}",
            [],
        )
    took = _seconds(task.started_at, task.finished_at)
    return (
        "succeeded",
        f"{task.task_key} succeeded at {_clock(task.finished_at)} after "
        f"{_count(task.attempt, 'attempt')}" + (f", {took} after its first claim" if took else ""),
        [],
    )


def _cancelled(s: Situation) -> _Answer:
    cancel = s.task_log[-1] if s.task_log else None
    when = _clock(cancel.at) if cancel else "?"
    was = f" (it was {cancel.source})" if cancel and cancel.source else ""
    end = s.run_log[-1] if s.run_log and s.run.state in TERMINAL_RUN_STATES else None
    if cancel is not None and (end is None or cancel.at < end.at):
        # Cancelled on its own (through the API), not as a leftover of its run's end.
        return (
            "cancelled",
            f"{s.task.task_key} was cancelled at {when}{was} by {cancel.actor}, while its "
            f"run was {_run_state_then(s, cancel.at)}",
            [],
        )
    return (
        "cancelled",
        f"{s.task.task_key} was cancelled at {when}{was} because {_run_end(s)}",
        [],
    )


def _run_state_then(s: Situation, at: datetime) -> str:
    before = [e for e in s.run_log if e.at <= at]
    return before[-1].target if before else "pending"


def _leftover(s: Situation) -> _Answer:
    return (
        "run_finished",
        f"{s.task.task_key} is still {s.task.state}, but {_run_end(s)}: it will not run; "
        f"the next advance of its run cancels it",
        [],
    )


_CASES = {
    "pending": _pending,
    "ready": _ready,
    "running": _running,
    "retrying": _retrying,
    "failed": _failed,
    "succeeded": _succeeded,
    "cancelled": _cancelled,
}


# --- pieces of sentences -----------------------------------------------------------------


def _run_end(s: Situation) -> str:
    """Why the run ended, e.g. 'its run was cancelled by user at 12:03:04'."""
    end = s.run_log[-1] if s.run_log else None
    when = f" at {_clock(end.at)}" if end else ""
    if s.run.state == "cancelled":
        return f"its run was cancelled by {end.actor if end else '?'}{when}"
    if s.run.state == "failed":
        failed = [t.task_key for t in s.siblings.values() if t.failed_for_good]
        return (
            f"its run failed{when} ({', '.join(failed) or 'a task'} failed for good, so "
            f"what depends on it could never run)"
        )
    return f"its run {s.run.state}{when}"


def _phrase(t: TaskView, at: datetime) -> str:
    """One upstream task in a few words: 'extract (running, attempt 2, lease held by
    worker-1 until 12:03:04)'."""
    if t.state == "running":
        expired = t.lease_expires_at is not None and t.lease_expires_at < at
        lease = f"lease held by {t.lease_owner} until {_clock(t.lease_expires_at)}"
        detail = f"running, attempt {t.attempt}, {lease}{' (expired)' if expired else ''}"
    elif t.state == "retrying":
        detail = f"retrying, attempt {t.attempt} due at {_clock(t.retry_due_at)}"
    elif t.state == "failed":
        detail = (
            f"failed for good after {_count(t.attempt, 'attempt')}: {_error(t.error)}"
            if t.failed_for_good
            else f"failed attempt {t.attempt} of {t.max_attempts}, retry to be scheduled"
        )
    elif t.state == "ready":
        detail = "ready, waiting for a worker"
    else:
        detail = t.state
    return f"{t.task_key} ({detail})"


def _upstream_fact(t: TaskView) -> dict[str, Any]:
    """What ``why --json`` says of each upstream task: the declared brief fields."""
    return {"task_run_id": t.id, **task_run.DECLARATION.shown_values(t, brief=True)}


def _attempt_lines(log: Sequence[AuditEntry]) -> list[str]:
    """'attempt 1: claimed by worker-1 at ..., failed at ...: ConnectionError: ...'."""
    lines: list[str] = []
    for e in log:
        if e.transition == "claim":
            lines.append(
                f"attempt {e.attempt}: claimed by {e.actor} at {_iso(e.at)} "
                f"(fencing token {e.fencing_token})"
            )
        elif lines and e.transition in _OUTCOMES:
            lines[-1] += f", {_OUTCOMES[e.transition]} at {_iso(e.at)}"
            if e.transition == "fail":
                lines[-1] += f": {_error(e.error)}"
                lines.extend(f"  at {frame}" for frame in failures.last_frames(e.error))
            elif e.transition == "succeed" and e.result is not None:
                lines[-1] += f", result {failures.short_value(e.result)}"
    return lines


_OUTCOMES = {
    "succeed": "succeeded",
    "fail": "failed",
    "cancel_running": "cancelled",
    "reap_lease": "lease expired and reaped",
}


def _context_lines(s: Situation) -> list[str]:
    task, clock = s.task, "the event log" if not s.live else "the database's clock"
    return [
        f"task run {task.id}: {task.task_key} (type {task.task_type}), attempt "
        f"{task.attempt} of {task.max_attempts}, fencing token {task.fencing_token}",
        f"run {s.run.id}: {s.run.workflow_name}, {s.run.state}",
        f"as of {_iso(s.at)} ({clock})",
    ]


def _error(error: Mapping[str, str] | None) -> str:
    return failures.summary(error) or "no error recorded"


def _all(n: int) -> str:
    return "its upstream task" if n == 1 else f"all {n} upstream tasks"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
