"""A claimed attempt announced to the observers (``flowforge.observe``): the attempt as
they see it, from its row, its claim and its dispatch's headers. docs/observability.md
says what each observer makes of it (the dispatch's wait, the attempt's span)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from flowforge import observe
from flowforge.aggregates.dispatch import ready_at_of, trace_context_of
from flowforge.app.results import Claim, TaskRunView


def attempt_started(
    task: TaskRunView,
    claim: Claim,
    lease_seconds: float,
    headers: Mapping[str, object],
    *,
    worker_id: str,
    began_ns: int,
) -> observe.AttemptWatch:
    """Announce the attempt (its span starts at ``began_ns``, taken before the claim):
    what watches it from here to its end. Unwatched, nothing is read from the headers."""
    if not observe.announce.watched:
        return observe.AttemptWatch()
    attempt = observe.Attempt(
        task_run_id=task.id,
        workflow_run_id=task.workflow_run_id,
        task_key=task.task_key,
        task_type=task.task_type,
        attempt=claim.attempt,
        fencing_token=claim.fencing_token,
        worker_id=worker_id,
        trace_context=trace_context_of(headers),
        ready_at=ready_at_of(headers),
        # The claim's own time, by the database's clock: the claim wrote its lease as
        # that clock's now plus the lease. (Not the row's updated_at: the claim
        # fallback's row is the one read before its claim.)
        claimed_at=claim.lease_expires_at - timedelta(seconds=lease_seconds),
        started_ns=began_ns,
    )
    return observe.announce.attempt_started(attempt)
