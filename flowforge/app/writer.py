"""The conditional writes of one transaction, each with its event and outbox row.

A :class:`Writer` wraps one open transaction. Each method is one step of the one rule:
the conditional write on the current-state row (0 rows: return ``None``, append nothing),
the event built from the row that write returned, at the row's new version, and an outbox
row when the task became ready. The transaction commits all of it or none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import (
    TASK_RUN_MACHINE,
    WORKFLOW_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.rules import initial_task_run_state
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.projections import projector
from flowforge.projections.database import Transaction
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow

#: Which conditional write takes each TaskRun edge (``sql/*.sql``).
TASK_STATEMENTS: Mapping[str, str] = {
    "dependencies_satisfied": "task_move",
    "cancel_pending": "task_move",
    "cancel_ready": "task_move",
    "claim": "task_claim",
    "succeed": "task_finish",
    "fail": "task_finish",
    "cancel_running": "task_finish",
    "reap_lease": "task_reclaim",
    "schedule_retry": "task_schedule_retry",
    "retry_ready": "task_retry_ready",
}
if set(TASK_STATEMENTS) != {t.name for t in TASK_RUN_MACHINE}:
    raise ValueError("every TaskRun edge needs exactly one conditional write")

_RUNNING = TaskRunState.RUNNING
_PENDING_RUN, _RUNNING_RUN, _CANCELLED_RUN = (
    WorkflowRunState.PENDING,
    WorkflowRunState.RUNNING,
    WorkflowRunState.CANCELLED,
)
#: A user's cancel takes one of two edges, decided by the row's state when it is written.
_CANCEL_RUN_FROM: Mapping[WorkflowRunState, Transition] = {
    _PENDING_RUN: WORKFLOW_RUN_MACHINE.get("cancel_before_start"),
    _RUNNING_RUN: WORKFLOW_RUN_MACHINE.get("cancel"),
}
if {(e.source, e.target) for e in _CANCEL_RUN_FROM.values()} != {
    (_PENDING_RUN, _CANCELLED_RUN),
    (_RUNNING_RUN, _CANCELLED_RUN),
}:
    raise ValueError("a user's cancel must cover exactly the edges into cancelled")


class Writer:
    """Conditional writes inside one open transaction."""

    def __init__(self, tx: Transaction, mapper: Mapper[UUID]) -> None:
        self.tx = tx
        self._mapper = mapper

    def now(self) -> datetime:
        (row,) = self.tx.run("db_now")
        value: datetime = row["db_now"]
        return value

    # --- task runs ---------------------------------------------------------------------

    def take_task_edge(
        self, edge: Transition, task_run_id: UUID, *, actor: str, **params: Any
    ) -> TaskRunRow | None:
        """Take ``edge`` if the row matches its condition; the new row, or None (lost)."""
        rows = self.tx.run(
            TASK_STATEMENTS[edge.name],
            {
                "id": task_run_id,
                "source": edge.source.value,
                "target": edge.target.value,
                "terminal": TASK_RUN_MACHINE.is_terminal(edge.target),
                **params,
            },
        )
        if not rows:
            return None
        event_class = task_run.EVENT_FOR_TRANSITION[edge.name]
        return self._record_task(rows[0], event_class, edge.source.value, actor)

    def renew_lease(
        self, task_run_id: UUID, fencing_token: int, lease_seconds: float, *, actor: str
    ) -> TaskRunRow | None:
        rows = self.tx.run(
            "task_renew_lease",
            {
                "id": task_run_id,
                "source": _RUNNING.value,
                "fencing_token": fencing_token,
                "lease_seconds": lease_seconds,
            },
        )
        if not rows:
            return None
        return self._record_task(rows[0], task_run.TaskRun.LeaseRenewed, _RUNNING.value, actor)

    def _record_task(
        self,
        row: Mapping[str, Any],
        event_class: type[task_run.TaskRun.Transitioned],
        source: str,
        actor: str,
    ) -> TaskRunRow:
        event = task_run.event_from_row(event_class, row, source=source, actor=actor)
        self.append([event])
        new = TaskRunRow.from_mapping(row)
        if new.state == TaskRunState.READY and source != TaskRunState.READY:
            self.enqueue_dispatch(
                new.id, new.task_key, new.task_type, new.fencing_token, at=event.timestamp
            )
        return new

    def enqueue_dispatch(
        self,
        task_run_id: UUID,
        task_key: str,
        task_type: str,
        fencing_token: int,
        *,
        at: datetime,
    ) -> None:
        """The outbox row that makes a ready task's dispatch durable with its event."""
        self.tx.run(
            "insert_outbox",
            {
                "dispatch_id": uuid4(),
                "task_run_id": task_run_id,
                "task_key": task_key,
                "task_type": task_type,
                "fencing_token": fencing_token,
                "created_at": at,
            },
        )

    # --- workflow runs -----------------------------------------------------------------

    def take_run_edge(
        self, edge: Transition, run_id: UUID, *, actor: str
    ) -> WorkflowRunRow | None:
        rows = self.tx.run(
            "run_move",
            {
                "id": run_id,
                "source": edge.source.value,
                "target": edge.target.value,
                "starts": edge.name == "start",
                "terminal": WORKFLOW_RUN_MACHINE.is_terminal(edge.target),
            },
        )
        return self._record_run(rows[0], edge, actor) if rows else None

    def cancel_run(self, run_id: UUID, *, actor: str) -> WorkflowRunRow | None:
        """Cancel a pending or running run in one conditional write; None if it is
        already terminal (or unknown). The event names the edge the row really took."""
        rows = self.tx.run(
            "run_cancel",
            {
                "id": run_id,
                "pending": _PENDING_RUN.value,
                "running": _RUNNING_RUN.value,
                "target": _CANCELLED_RUN.value,
            },
        )
        if not rows:
            return None
        edge = _CANCEL_RUN_FROM[WorkflowRunState(rows[0]["source"])]
        return self._record_run(rows[0], edge, actor)

    def _record_run(self, row: Mapping[str, Any], edge: Transition, actor: str) -> WorkflowRunRow:
        event = workflow_run.event_from_row(
            workflow_run.EVENT_FOR_TRANSITION[edge.name],
            row,
            source=edge.source.value,
            actor=actor,
        )
        self.append([event])
        return WorkflowRunRow.from_mapping(row)

    def create_run(
        self,
        definition: WorkflowDefinition,
        inputs: dict[str, Any],
        *,
        idempotency_key: str | None,
        actor: str,
    ) -> tuple[UUID, bool]:
        """Create the run and its task runs; ``(id, False)`` if the key already exists."""
        at, run_id = self.now(), uuid4()
        created = workflow_run.created_event(
            run_id,
            at=at,
            workflow_name=definition.name,
            definition=definition.to_dict(),
            inputs=inputs,
            idempotency_key=idempotency_key,
            actor=actor,
        )
        if not projector.apply_event(self.tx, created):
            (existing,) = self.tx.run(
                "select_run_by_idempotency_key", {"idempotency_key": idempotency_key}
            )
            return existing["id"], False
        self.append([created])
        for task in definition.tasks:
            self._create_task(run_id, definition, task.key, at=at, actor=actor)
        return run_id, True

    def _create_task(
        self, run_id: UUID, definition: WorkflowDefinition, key: str, *, at: datetime, actor: str
    ) -> None:
        task = definition.task(key)
        state = initial_task_run_state(len(task.depends_on))
        event = task_run.created_event(
            uuid4(),
            at=at,
            workflow_run_id=run_id,
            task_key=task.key,
            task_type=task.type,
            depends_on=list(task.depends_on),
            max_attempts=definition.retry_policy_for(key).max_attempts,
            state=state,
            actor=actor,
        )
        projector.apply_event(self.tx, event)
        self.append([event])
        if state is TaskRunState.READY:
            self.enqueue_dispatch(event.originator_id, task.key, task.type, 0, at=at)

    def append(self, events: list[DomainEventProtocol[UUID]]) -> None:
        projector.append_events(self.tx, self._mapper, events)
