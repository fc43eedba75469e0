"""The audit log: events read back from the log and shown as transitions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent

from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app.results import AuditEntry, WorkflowRunView

#: The fields of a carried-over result's provenance (``TaskRun.ResultCarriedOver``).
_PROVENANCE = ("carried_from_run_id", "carried_from_task_run_id", "carried_from_attempt")


def in_log_order(
    events: Application[UUID], stored: Iterable[StoredEvent], task_keys: dict[UUID, str]
) -> Iterator[AuditEntry]:
    """The stored events as audit entries, one at a time, in the order given (the log's).
    ``task_keys`` names the task runs by id; a task's creation seen on the way adds it."""
    for one in stored:
        event = events.mapper.to_domain_event(one)
        if isinstance(event, TaskRun.Created):
            task_keys[event.originator_id] = event.task_key
        yield _entry(event, task_keys.get(event.originator_id))


def run_creation(run: WorkflowRunView, actor: str) -> AuditEntry:
    """A run's creation as its event shows it, from its row (created at its event's
    time, with its rerun_of and start_at) and the actor the event names: what
    :func:`entries` makes of the event, without decoding its definition."""
    return AuditEntry(
        at=run.created_at,
        aggregate="WorkflowRun",
        aggregate_id=run.id,
        version=1,
        event=WorkflowRun.Created.__name__,
        transition="create",
        source=None,
        target="pending",
        actor=actor,
        rerun_of=run.rerun_of,
        start_at=run.start_at,
    )


def entries(events: Application[UUID], stored: Sequence[StoredEvent]) -> list[AuditEntry]:
    """The stored events (each aggregate's in version order, ``Reads.stored_events_of``)
    as audit entries in time order, decoded by the event log's own mapper."""
    found: list[AuditEntry] = []
    task_keys: dict[UUID, str] = {}
    for one in stored:
        event = events.mapper.to_domain_event(one)
        if isinstance(event, TaskRun.Created):
            task_keys[event.originator_id] = event.task_key
        found.append(_entry(event, task_keys.get(event.originator_id)))
    # Ties (one transaction's events share its timestamp) keep the log's version order.
    found.sort(key=lambda e: (e.at, e.aggregate != "WorkflowRun", e.version))
    return found


def entry(event: object, task_key: str | None) -> AuditEntry:
    """One decoded event of a run or a task as an audit entry (the feed's too); a
    ``TypeError`` for any other aggregate's event."""
    return _entry(event, task_key)


def _entry(event: object, task_key: str | None) -> AuditEntry:
    if isinstance(event, TaskRun.Created):
        return _base(
            event,
            "TaskRun",
            "create",
            None,
            event.state,
            event.actor,
            task_key,
            attempt=1,
            fencing_token=0,
        )
    if isinstance(event, TaskRun.Transitioned):
        return _base(
            event,
            "TaskRun",
            event.TRANSITION,
            event.source,
            event.state,
            event.actor,
            task_key,
            attempt=event.attempt,
            fencing_token=event.fencing_token,
            lease_owner=event.lease_owner,
            lease_expires_at=event.lease_expires_at,
            retry_due_at=event.retry_due_at,
            result=event.result,
            error=event.error,
            # Events stored before reruns lack these (and decode without them).
            **{name: vars(event).get(name) for name in _PROVENANCE},
            worker_losses=vars(event).get("worker_losses", 0),
        )
    if isinstance(event, WorkflowRun.Created):
        return _base(
            event,
            "WorkflowRun",
            "create",
            None,
            "pending",
            event.actor,
            None,
            # Events stored before these fields existed decode without them.
            rerun_of=vars(event).get("rerun_of"),
            start_at=vars(event).get("start_at"),
        )
    if isinstance(event, WorkflowRun.Transitioned):
        return _base(
            event, "WorkflowRun", event.TRANSITION, event.source, event.state, event.actor, None
        )
    raise TypeError(f"not a FlowForge event: {type(event).__qualname__}")


def _base(
    event: TaskRun.Event | WorkflowRun.Event,
    aggregate: str,
    transition: str,
    source: str | None,
    target: str,
    actor: str,
    task_key: str | None,
    **details: object,
) -> AuditEntry:
    return AuditEntry(
        at=event.timestamp,
        aggregate=aggregate,
        aggregate_id=event.originator_id,
        version=event.originator_version,
        event=type(event).__name__,
        transition=transition,
        source=source,
        target=target,
        actor=actor,
        task_key=task_key,
        **details,  # type: ignore[arg-type]
    )
