"""``why``'s cases of a task that waits to run: pending (for its upstream, or for its
run's start time) and ready (its dispatch in the outbox, held by a limit, published to a
queue that someone consumes or nobody does).
"""

from __future__ import annotations

from datetime import datetime

from flowforge import timefmt
from flowforge.aggregates.on_failure import OnFailure
from flowforge.app import redispatch
from flowforge.app.concurrency_limits import Hold
from flowforge.app.why.facts import Situation
from flowforge.app.why.sentences import (
    SCHEDULER_RUNNING,
    Answer,
    ago,
    all_upstream,
    clock,
    count,
    iso,
    on_failure,
    phrase,
    who_runs,
)


def pending(s: Situation) -> Answer:
    # A pending run (no task claimed yet: a claim starts it) is no reason of its own: a
    # task pending in it waits for its upstream like any other. A delayed run is: none
    # of its tasks can move before its start time.
    if s.run.state == "pending" and s.run.start_at is not None:
        return _waiting_for_start_time(s, s.run.start_at)
    task, key = s.task, s.task.task_key
    if mapped := _waiting_for_mapped_tasks(s):
        return mapped
    upstream = [s.siblings[k] for k in task.depends_on if k in s.siblings]
    blocking = [u for u in upstream if u.state != "succeeded"]
    if not blocking:
        return (
            "promotion_due",
            f"{key} is pending, but {all_upstream(len(upstream))} succeeded: a scheduler makes "
            f"it ready on its next pass",
            [who_runs(s, SCHEDULER_RUNNING)],
        )
    dead = [u for u in blocking if u.failed_for_good or u.state == "cancelled"]
    if dead:
        return (
            "upstream_failed",
            f"{key} will not run: upstream {count(len(dead), 'task')} "
            f"{', '.join(phrase(u, s.at) for u in dead)}",
            [
                "a task runs only after all its upstream tasks succeed; "
                + (
                    "the scheduler cancels it (upstream_failed), and the run fails once "
                    "the tasks that do not depend on the failure have ended "
                    '(on_failure = "finish_branches")'
                    if on_failure(s) is OnFailure.FINISH_BRANCHES
                    else "the run fails, and the scheduler cancels what can no longer run"
                )
            ],
        )
    done = [u.task_key for u in upstream if u.state == "succeeded"]
    return (
        "waiting_for_upstream",
        f"{key} is waiting for {count(len(blocking), 'upstream task')}: "
        f"{', '.join(phrase(u, s.at) for u in blocking)}",
        [
            *([f"already succeeded upstream: {', '.join(done)}"] if done else []),
            f"ask `flowforge why {s.run.id}/{blocking[0].task_key}` why "
            f"{blocking[0].task_key} is not done",
        ],
    )


def _waiting_for_mapped_tasks(s: Situation) -> Answer | None:
    """A task that depends on a mapped task (``map_over``) not yet done: it waits for
    the mapped task's upstream to return its list, then for every element."""
    waiting = [v for v in s.mapped.values() if v.state != "succeeded"]
    if not waiting:
        return None
    key, first = s.task.task_key, waiting[0]
    lines = []
    for view in waiting:
        if view.elements is None:
            lines.append(
                f"{view.key} is not expanded yet: it waits for {view.map_over} to return "
                f"its list ({view.map_over} is {view.upstream_state or 'unknown'})"
            )
        else:
            counts = ", ".join(f"{n:,} {state}" for state, n in sorted(view.counts.items()))
            lines.append(f"{view.key_range}: {counts}")
    ask = (
        f"{s.run.id}/{first.map_over}"
        if first.elements is None
        else f"{s.run.id}/{first.key}[N] (one element)"
    )
    return (
        "waiting_for_mapped_task",
        f"{key} is waiting for the mapped task{'s' if len(waiting) > 1 else ''} "
        f"{', '.join(v.key for v in waiting)}: {lines[0]}",
        [
            *lines[1:],
            "a task that depends on a mapped task runs once every element has succeeded, "
            "with their results as a list in index order",
            f"ask `flowforge why {ask}`",
        ],
    )


def _waiting_for_start_time(s: Situation, start_at: datetime) -> Answer:
    """A task of a delayed run that has not started (``flowforge submit --at/--in``)."""
    key, upstream = s.task.task_key, s.task.depends_on
    after = f"; then it waits for its upstream: {', '.join(upstream)}" if upstream else ""
    if start_at > s.at:
        return (
            "waiting_for_start_time",
            f"{key} is waiting for its run's start time: the run starts at "
            f"{clock(start_at)} (in {timefmt.duration((start_at - s.at).total_seconds())})"
            f"{after}",
            [
                f"the run was submitted to start at {iso(start_at)} (the database's "
                f"clock): until then none of its tasks is ready or dispatched; then a "
                f"scheduler starts it and makes its first tasks ready",
                f"`flowforge cancel {s.run.id}` cancels it before it starts",
            ],
        )
    return (
        "start_due",
        f"{key} is waiting for its run's start time, {clock(start_at)} "
        f"({ago(start_at, s.at)}): a scheduler starts the run on its next pass{after}",
        [who_runs(s, SCHEDULER_RUNNING)],
    )


def ready(s: Situation) -> Answer:
    key = s.task.task_key
    since = s.task_log[-1].at if s.task_log else s.at
    if not s.dispatches:
        return (
            "no_dispatch",
            f"{key} is ready since {clock(since)} but has no dispatch in the outbox",
            [
                "every transition to ready writes a dispatch in the same transaction; an "
                "outbox emptied by hand would explain this"
            ],
        )
    latest = s.dispatches[-1]
    if s.hold is not None and latest.created_at < s.hold.held_at:
        return _held(s, s.hold)
    again = _again(len(s.dispatches), latest.reason)
    if latest.published_at is None:
        return (
            "dispatch_pending",
            f"{key} is ready; its dispatch is waiting in the outbox since "
            f"{clock(latest.created_at)} ({ago(latest.created_at, s.at)}): not yet "
            f"published{again}",
            [
                who_runs(
                    s,
                    "a publisher sends outbox rows to the broker: is `flowforge publisher` "
                    "(or `flowforge run`) running against this database?",
                )
            ],
        )
    published = (
        f"its dispatch was published at {clock(latest.published_at)} "
        f"({ago(latest.published_at, s.at)})"
    )
    if s.queue is not None and s.queue.consumers == 0:
        return _no_consumer(s, published + again)
    consumed = (
        [
            f"queue {s.queue.queue}: {count(s.queue.consumers, 'consumer')}, "
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
            who_runs(
                s,
                f"a worker that runs task type {s.task.task_type!r} claims it when it is "
                f"free: are workers running with it (`flowforge worker --tasks MODULE`), "
                f"and all busy?",
            ),
        ],
    )


#: Why the redispatch net gave a task a new dispatch (``app/redispatch.py``), as ``why``
#: says it.
REDISPATCHED_BECAUSE = {
    redispatch.QUEUE_SHORT: "its queue held fewer messages than tasks waiting on it, so "
    "an earlier dispatch was lost (dead-lettered, purged or gone with the queue)",
    redispatch.RUNNER_STARTED: "an embedded runner started, and the process that held "
    "its earlier dispatch in memory had exited",
}


def _again(dispatches: int, reason: str | None) -> str:
    """The headline's note on a task dispatched more than once, and why it was."""
    if dispatches < 2:
        return ""
    because = REDISPATCHED_BECAUSE.get(reason or "")
    if because is None:
        return f" (dispatch {dispatches} of this task)"
    return f" (dispatch {dispatches} of this task, redispatched because {because})"


def _held(s: Situation, hold: Hold) -> Answer:
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
        f"{hold.limit} (held since {clock(hold.held_at)}, {ago(hold.held_at, s.at)})",
        [
            f"a claim past a concurrency limit leaves the task ready and holds its "
            f"dispatch; when {frees} stops running, its slot dispatches the oldest held "
            f"task again",
            see,
        ],
    )


def _no_consumer(s: Situation, published: str) -> Answer:
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
