"""``why``'s cases of a task that has ended (failed, succeeded, cancelled) or that its
run's end left behind.
"""

from __future__ import annotations

from datetime import datetime

from flowforge.aggregates.on_failure import OnFailure
from flowforge.aggregates.task_run import ACTOR_SCHEDULER
from flowforge.app.why.facts import TERMINAL_RUN_STATES, Situation
from flowforge.app.why.sentences import (
    Answer,
    between,
    clock,
    count,
    error_text,
    failed_upstream,
    on_failure,
    run_end,
)


def failed(s: Situation) -> Answer:
    task, key, error = s.task, s.task.task_key, error_text(s.task.error)
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
            f"{clock(task.finished_at)} ({error}) and is not retried: {run_end(s)}",
            [],
        )
    return (
        "failed",
        f"{key} failed for good at {clock(task.finished_at)} after "
        f"{count(task.attempt, 'attempt')}: {error}",
        [f"{run_end(s)}" if run_ended else _what_follows(s)],
    )


def _what_follows(s: Situation) -> str:
    if on_failure(s) is OnFailure.FINISH_BRANCHES:
        return (
            'on_failure = "finish_branches": what depends on it is cancelled '
            "(upstream_failed), the tasks that do not run on, and its run fails when "
            "they have ended"
        )
    return "its run fails on a scheduler's next pass (fail-fast)"


def succeeded(s: Situation) -> Answer:
    task = s.task
    if task.carried_from_run_id is not None:
        # A rerun's task that did not run: say where its result really came from.
        return (
            "succeeded",
            f"{task.task_key} did not run in this run: its result was carried over at "
            f"{clock(task.finished_at)} from run {task.carried_from_run_id}, where task "
            f"run {task.carried_from_task_run_id} produced it on attempt "
            f"{task.carried_from_attempt}",
            [],
        )
    took = between(task.started_at, task.finished_at)
    return (
        "succeeded",
        f"{task.task_key} succeeded at {clock(task.finished_at)} after "
        f"{count(task.attempt, 'attempt')}" + (f", {took} after its first claim" if took else ""),
        [],
    )


def cancelled(s: Situation) -> Answer:
    cancel = s.task_log[-1] if s.task_log else None
    when = clock(cancel.at) if cancel else "?"
    was = f" (it was {cancel.source})" if cancel and cancel.source else ""
    end = s.run_log[-1] if s.run_log and s.run.state in TERMINAL_RUN_STATES else None
    upstream = failed_upstream(s)
    if (
        upstream
        and on_failure(s) is OnFailure.FINISH_BRANCHES
        and (cancel is None or cancel.actor == ACTOR_SCHEDULER)
    ):
        # Cancelled by the advance as soon as its upstream failed, the run going on.
        return (
            "upstream_failed",
            f"{s.task.task_key} was cancelled at {when}{was} as upstream_failed: "
            f"{', '.join(upstream)}, which it depends on, failed for good, so it could "
            f'never run (on_failure = "finish_branches": the tasks that do not depend '
            f"on it run on)",
            [],
        )
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
        f"{s.task.task_key} was cancelled at {when}{was} because {run_end(s)}",
        [],
    )


def _run_state_then(s: Situation, at: datetime) -> str:
    before = [e for e in s.run_log if e.at <= at]
    return before[-1].target if before else "pending"


def leftover(s: Situation) -> Answer:
    return (
        "run_finished",
        f"{s.task.task_key} is still {s.task.state}, but {run_end(s)}: it will not run; "
        f"the next advance of its run cancels it",
        [],
    )
