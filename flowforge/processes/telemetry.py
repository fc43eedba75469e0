"""What a worker reports of an attempt: how long its dispatch waited to be claimed (a
metric), and the attempt's span (a trace). docs/observability.md says what each means."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from flowforge import metrics, tracing
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
) -> tracing.AttemptSpan:
    """Count the dispatch's wait and open the attempt's span (from ``began_ns``, taken
    before the claim), a child of the run's span its headers carry."""
    observe_ready_to_claimed(task.task_type, claim, lease_seconds, headers)
    attempt = tracing.Attempt(
        task_run_id=task.id,
        workflow_run_id=task.workflow_run_id,
        task_key=task.task_key,
        task_type=task.task_type,
        attempt=claim.attempt,
        fencing_token=claim.fencing_token,
        worker_id=worker_id,
    )
    return tracing.AttemptSpan(trace_context_of(headers), attempt, started_ns=began_ns)


def observe_ready_to_claimed(
    task_type: str, claim: Claim, lease_seconds: float, headers: Mapping[str, object]
) -> None:
    """From the dispatch's outbox row to its claim, both by the database's clock: the
    claim's time is its lease's expiry less the lease (one clock, no worker's skew)."""
    if metrics.READY_TO_CLAIMED.real is None:
        return
    ready_at = ready_at_of(headers)
    if ready_at is None:  # a dispatch from a FlowForge without the header
        return
    claimed_at = claim.lease_expires_at - timedelta(seconds=lease_seconds)
    waited = (claimed_at - ready_at).total_seconds()
    metrics.READY_TO_CLAIMED.labels(task_type).observe(max(waited, 0.0))
