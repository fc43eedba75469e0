"""The pieces of sentences ``why``'s cases are made of: times, upstream tasks,
attempts, errors, counts, and the advice on what moves a task on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from flowforge import timefmt
from flowforge.aggregates import failures, mapping, rules, task_run
from flowforge.aggregates.on_failure import OnFailure
from flowforge.app.results import AuditEntry
from flowforge.app.why.facts import Situation, TaskView

SCHEDULER_RUNNING = "is `flowforge scheduler` (or `flowforge run`) running against this database?"

#: (reason, headline, details) of one case.
Answer = tuple[str, str, list[str]]
#: A time not known reads as "?" in a sentence (a duration not known is left out).
iso = partial(timefmt.iso, missing="?")
clock = partial(timefmt.clock, missing="?")
ago = partial(timefmt.ago, missing="?")
until = partial(timefmt.until, missing="?")
between = partial(timefmt.between, missing="")


def who_runs(s: Situation, deployed: str) -> str:
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


def run_end(s: Situation) -> str:
    """Why the run ended, e.g. 'its run was cancelled by user at 12:03:04'."""
    end = s.run_log[-1] if s.run_log else None
    when = f" at {clock(end.at)}" if end else ""
    if s.run.state == "cancelled":
        return f"its run was cancelled by {end.actor if end else '?'}{when}"
    if s.run.state == "failed":
        failed = ", ".join(t.task_key for t in s.siblings.values() if t.failed_for_good)
        if upstream := failed_upstream(s):
            return (
                f"its run failed{when}: {', '.join(upstream)}, which it depends on, failed "
                f"for good, so it could never run"
            )
        if on_failure(s) is OnFailure.FINISH_BRANCHES:
            return (
                f"its run failed{when}, once every branch had ended ({failed or 'a task'} "
                f"failed for good)"
            )
        # Fail-fast: the task need not depend on the failure at all; say so.
        return (
            f"its run failed{when} when {failed or 'a task'} failed for good (fail-fast: "
            f"a failure ends the whole run, tasks that do not depend on it included; "
            f'on_failure = "finish_branches" lets them finish)'
        )
    return f"its run {s.run.state}{when}"


def on_failure(s: Situation) -> OnFailure:
    """The run's policy for a task failed for good (runs stored before it: the spec's)."""
    return OnFailure(s.run.definition.get("on_failure", OnFailure.FAIL_FAST))


def failed_upstream(s: Situation) -> list[str]:
    """The tasks failed for good that this task depends on, directly or through others
    (the run's definition says through which; ``siblings`` hold the failed ones)."""
    failed = [key for key, t in s.siblings.items() if t.failed_for_good]
    if not failed:
        return []
    depends_on = {t["key"]: t.get("depends_on", ()) for t in s.run.definition.get("tasks", ())}
    return [key for key in failed if s.task.task_key in rules.downstream_of([key], depends_on)]


def phrase(t: TaskView, at: datetime) -> str:
    """One upstream task in a few words: 'extract (running, attempt 2, lease held by
    worker-1 until 12:03:04)'."""
    if t.state == "running":
        expired = t.lease_expires_at is not None and t.lease_expires_at < at
        lease = f"lease held by {t.lease_owner} until {clock(t.lease_expires_at)}"
        detail = f"running, attempt {t.attempt}, {lease}{' (expired)' if expired else ''}"
    elif t.state == "retrying":
        detail = f"retrying, attempt {t.attempt} due at {clock(t.retry_due_at)}"
    elif t.state == "failed":
        detail = (
            f"failed for good after {count(t.attempt, 'attempt')}: {error_text(t.error)}"
            if t.failed_for_good
            else f"failed attempt {t.attempt} of {t.max_attempts}, retry to be scheduled"
        )
    elif t.state == "ready":
        detail = "ready, waiting for a worker"
    else:
        detail = t.state
    return f"{t.task_key} ({detail})"


def upstream_fact(t: TaskView) -> dict[str, Any]:
    """What ``why --json`` says of each upstream task: the declared brief fields."""
    return {"task_run_id": t.id, **task_run.DECLARATION.shown_values(t, brief=True)}


def attempt_lines(log: Sequence[AuditEntry]) -> list[str]:
    """'attempt 1: claimed by worker-1 at ..., failed at ...: ConnectionError: ...'."""
    lines: list[str] = []
    for e in log:
        if e.transition == "claim":
            lines.append(
                f"attempt {e.attempt}: claimed by {e.actor} at {iso(e.at)} "
                f"(fencing token {e.fencing_token})"
            )
        elif lines and e.transition in _OUTCOMES:
            lines[-1] += f", {_OUTCOMES[e.transition]} at {iso(e.at)}"
            if e.transition == "fail":
                lines[-1] += f": {error_text(e.error)}"
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


def context_lines(s: Situation) -> list[str]:
    task, source = s.task, "the event log" if not s.live else "the database's clock"
    return [
        *_element_lines(s),
        f"task run {task.id}: {task.task_key} (type {task.task_type}), attempt "
        f"{task.attempt} of {task.max_attempts}, fencing token {task.fencing_token}",
        f"run {s.run.id}: {s.run.workflow_name}, {s.run.state}",
        f"as of {iso(s.at)} ({source})",
    ]


def _element_lines(s: Situation) -> list[str]:
    """Of an element of a mapped task (``map_over``): which element of how many, and its
    input; of any other task, none."""
    task = s.task
    if task.map_index is None:
        return []
    over = ", ".join(task.depends_on)  # an element depends on its list's task alone
    upstream = s.siblings.get(over)
    of = "" if upstream is None else f" of {mapping.list_length(upstream.result):,}"
    item = failures.short_value(task.map_item, ELEMENT_ITEM)
    return [
        f"element {task.map_index}{of} of the mapped task {mapping.mapped_task_of(task.task_key)}"
        f" (over {over}'s list): its input (ctx.item) is {item}"
    ]


#: How much of an element's input ``why`` shows (the whole value: ``status --json``).
ELEMENT_ITEM = 60


def error_text(error: Mapping[str, str] | None) -> str:
    return failures.summary(error) or "no error recorded"


def all_upstream(n: int) -> str:
    return "its upstream task" if n == 1 else f"all {n} upstream tasks"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
