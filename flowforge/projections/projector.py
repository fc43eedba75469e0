"""Events to rows: the one function that applies an event to the projected tables.

The rebuild folds runs' and tasks' events in memory (``folding.py``: the same columns)
and runs :func:`apply_event` for the others; the write path runs it inline for creation
events, and for transitions it runs the conditional write (which computes
the same row in the database) and builds the event from the row that write returned.
Both directions use the aggregates' ``MUTABLE_FIELDS``, so the row and the event carry
the same columns by construction; the rebuild test proves the round trip on a real,
concurrent workload.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from flowforge import errors
from flowforge.aggregates import cron_schedule, task_run, task_type_limit, workflow_run
from flowforge.aggregates.cron_schedule import Schedule
from flowforge.aggregates.machines import SCHEDULE_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.projections.db.protocols import Transaction

#: The time of what a transaction creates, when that is the transaction's own clock
#: (PostgreSQL's now(), the same for every statement of it): it stands in the creation
#: events and rows until SQL writes now() in its place (``Writes.append``, and NULL for
#: a row's ``created_at``), so a run's creation need not ask the clock first. No event
#: is ever stored with it.
TRANSACTION_NOW = datetime(1, 1, 1, tzinfo=UTC)


def row_time(at: datetime) -> datetime | None:
    """``at`` as a row's timestamp parameter: NULL for :data:`TRANSACTION_NOW`."""
    return None if at == TRANSACTION_NOW else at


def apply_event(tx: Transaction, event: DomainEventProtocol[UUID]) -> bool:
    """Apply ``event`` to the rows. False only for a run whose idempotency key exists,
    or a schedule whose name a live schedule has."""
    if isinstance(event, TaskRun.Created):
        tx.defer("insert_task_run", task_created_params(event))
        return True
    if isinstance(event, WorkflowRun.Created):
        return _insert_workflow_run(tx, event)
    if isinstance(event, TaskRun.Transitioned):
        task_run.check_replayable(event)
        _update(tx, "apply_task_run_event", event, task_run.DECLARATION.carried(event))
        return True
    if isinstance(event, WorkflowRun.Transitioned):
        workflow_run.check_replayable(event)
        _update(tx, "apply_workflow_run_event", event, workflow_run.DECLARATION.carried(event))
        return True
    if isinstance(
        event, task_type_limit.TaskTypeLimit.Created | task_type_limit.TaskTypeLimit.Changed
    ):
        _apply_limit(tx, event)
        return True
    return _apply_schedule_event(tx, event)


def _insert_workflow_run(tx: Transaction, event: WorkflowRun.Created) -> bool:
    """A run's row (and its limit's counter row): False if its idempotency key exists."""
    params = _created_params(event, workflow_run.STATIC_FIELDS, WORKFLOW_RUN_MACHINE.initial.value)
    if event.idempotency_key is None:
        # Nothing to conflict with (a fresh id, no key): no answer to wait for, so
        # PostgreSQL sends the row with the rest of the run's creation.
        tx.defer("insert_workflow_run", params)
        _insert_run_limit(tx, event)
        return True
    inserted = bool(tx.run("insert_workflow_run", params))
    if inserted:
        _insert_run_limit(tx, event)
    return inserted


def _apply_schedule_event(tx: Transaction, event: DomainEventProtocol[UUID]) -> bool:
    """A cron schedule's event (migration 11): False for a creation whose name a live
    schedule has. Any other event has no projection: the log is corrupt."""
    if isinstance(event, Schedule.Created):
        params = _created_params(
            event, cron_schedule.STATIC_FIELDS, SCHEDULE_MACHINE.initial.value
        )
        params["next_fire_at"] = event.next_fire_at
        return bool(tx.run("insert_schedule", params))
    if isinstance(event, Schedule.Transitioned):
        cron_schedule.check_replayable(event)
        _update(tx, "apply_schedule_event", event, cron_schedule.DECLARATION.carried(event))
        return True
    raise errors.CorruptEventLogError(f"no projection for event {type(event).__qualname__}")


def _insert_run_limit(tx: Transaction, event: WorkflowRun.Created) -> None:
    """A run whose definition limits its running tasks gets its counter row."""
    limit = event.definition.get("max_running_tasks")
    if limit is not None:
        tx.defer(
            "insert_run_limit", {"workflow_run_id": event.originator_id, "max_running": limit}
        )


def _apply_limit(
    tx: Transaction,
    event: task_type_limit.TaskTypeLimit.Created | task_type_limit.TaskTypeLimit.Changed,
) -> None:
    """An operator's change of a type's limit (the rebuild; the write path runs the same
    statement itself). The counter is recounted once the log is applied."""
    params = {
        "task_type": event.task_type,
        "max_running": event.max_running,
        "version": event.originator_version,
        "changed_at": event.timestamp,
        "changed_by": event.actor,
    }
    if not tx.run("change_task_type_limit", params):
        raise errors.CorruptEventLogError(
            f"limit change of task type {event.task_type!r} v{event.originator_version} "
            f"does not follow the row"
        )


def task_created_params(event: TaskRun.Created) -> dict[str, Any]:
    """The row of a task run's creation (``insert_task_run``)."""
    return _created_params(event, task_run.STATIC_FIELDS, event.state)


def _created_params(event: Any, fields: tuple[str, ...], state: str) -> dict[str, Any]:
    # A creation event stored before a field was declared lacks it: NULL in the row
    # (the rebuild then fills what it can, e.g. a task's lease from its run's definition).
    params = {f: vars(event).get(f) for f in fields}
    params.update(
        id=event.originator_id,
        version=event.originator_version,
        created_at=row_time(event.timestamp),
        state=state,
    )
    return params


def _update_params(event: Any, carried: dict[str, Any]) -> dict[str, Any]:
    # An event stored before a field was declared carries its initial value (base.carried).
    params = dict(carried)
    params.update(
        id=event.originator_id,
        version=event.originator_version,
        updated_at=event.timestamp,
        source=event.source,
    )
    return params


def off_row(event: Any) -> str:
    """How a transition that does not follow its row is named (the rebuild's refusal)."""
    return (
        f"{type(event).__qualname__} of {event.originator_id} "
        f"v{event.originator_version} does not follow the row: the row is not at "
        f"v{event.originator_version - 1} in state {event.source!r}"
    )


def _update(tx: Transaction, statement: str, event: Any, carried: dict[str, Any]) -> None:
    # The statement matches only the row at the previous version AND in the event's
    # source state: an event that skips a version or starts from another state than
    # the row's is corruption, not something to apply.
    if not tx.run(statement, _update_params(event, carried)):
        raise errors.CorruptEventLogError(off_row(event))
