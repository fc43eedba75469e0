"""Outbox rows to dispatch messages."""

from __future__ import annotations

from flowforge.aggregates.dispatch import DispatchMessage, dispatch_headers
from flowforge.app.results import DispatchView
from flowforge.projections.tables import OutboxRow, PendingOutboxRow


def message_for(row: OutboxRow | DispatchView, deployment: str) -> DispatchMessage:
    """The dispatch of an outbox row (or the service's view of one), stamped with the
    deployment that publishes it."""
    return DispatchMessage(
        dispatch_id=row.dispatch_id,
        task_run_id=row.task_run_id,
        task_key=row.task_key,
        task_type=row.task_type,
        fencing_token=row.fencing_token,
        deployment=deployment,
    )


def headers_for(row: PendingOutboxRow) -> dict[str, str]:
    """The headers the dispatch of a pending outbox row travels with: when it was
    written, and its run's trace context."""
    return dispatch_headers(row.created_at, row.trace_context)
