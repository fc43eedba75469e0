"""The explanation: one headline sentence and details for a situation.

:func:`explain` is pure (each case is a unit test) and picks the case by the task's
state: :mod:`~flowforge.app.why.waiting` (pending, ready),
:mod:`~flowforge.app.why.running` (running, retrying), :mod:`~flowforge.app.why.ended`
(failed, succeeded, cancelled, and a task its run's end left behind), each made of
:mod:`~flowforge.app.why.sentences`. :func:`why` gathers the facts
(:mod:`flowforge.app.why.facts`) and explains them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from uuid import UUID

from flowforge.aggregates import mapping
from flowforge.app.ports import QueueProbe
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge
from flowforge.app.why import ended, running, waiting
from flowforge.app.why.facts import (
    TERMINAL_RUN_STATES,
    Explanation,
    Situation,
    situation_as_of,
    situation_now,
)
from flowforge.app.why.sentences import Answer, attempt_lines, context_lines, iso, upstream_fact


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
        return _not_created(app, app.get_task_run(task_run_id), at)
    return explain(replace(situation, embedded=embedded))


def _not_created(app: FlowForge, row: TaskRunView, at: datetime) -> Explanation:
    """A task asked about as of a moment before it existed: before its run was
    submitted, or (an element of a mapped task) before its list was returned."""
    if row.map_index is None:
        created = app.get_workflow_run(row.workflow_run_id).created_at
        why_not = f"its run was submitted at {iso(created)}"
    else:
        over, mapped = ", ".join(row.depends_on), mapping.mapped_task_of(row.task_key)
        why_not = (
            f"{mapped} was not expanded yet: its elements were created when {over} "
            f"returned its list, at {iso(row.created_at)}"
        )
    return Explanation(
        task_run_id=row.id,
        workflow_run_id=row.workflow_run_id,
        task_key=row.task_key,
        state="none",
        reason="not_created",
        headline=f"{row.task_key} did not exist yet at {iso(at)}: {why_not}",
        as_of=at,
        from_log=True,
    )


def explain(s: Situation) -> Explanation:
    """The headline and details for a situation (pure)."""
    task, run = s.task, s.run
    if run.state in TERMINAL_RUN_STATES and task.state not in ("succeeded", "failed", "cancelled"):
        reason, headline, details = ended.leftover(s)
    else:
        reason, headline, details = _CASES[task.state](s)
    return Explanation(
        task_run_id=task.id,
        workflow_run_id=run.id,
        task_key=task.task_key,
        state=task.state,
        reason=reason,
        headline=headline,
        details=[*details, *attempt_lines(s.task_log), *context_lines(s)],
        as_of=s.at,
        from_log=not s.live,
        attempt=task.attempt,
        max_attempts=task.max_attempts,
        upstream=[upstream_fact(s.siblings[k]) for k in task.depends_on if k in s.siblings],
    )


_CASES: Mapping[str, Callable[[Situation], Answer]] = {
    "pending": waiting.pending,
    "ready": waiting.ready,
    "running": running.running,
    "retrying": running.retrying,
    "failed": ended.failed,
    "succeeded": ended.succeeded,
    "cancelled": ended.cancelled,
}
