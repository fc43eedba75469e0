"""The outbox's rows: a ready task's dispatch, durable in the transaction that made it ready."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from uuid import UUID

from flowforge.aggregates.ids import new_id
from flowforge.projections import projector
from flowforge.projections.db.protocols import Transaction
from flowforge.projections.reads import id_list
from flowforge.projections.tables import PendingOutboxRow, TaskRunRow


class OutboxWrites:
    """The outbox in one write transaction."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx
        #: Whether this transaction added a dispatch (the store rings the publishers).
        self.enqueued = False

    def enqueue(
        self,
        task_run_id: UUID,
        task_key: str,
        task_type: str,
        fencing_token: int,
        *,
        at: datetime,
    ) -> UUID:
        """The outbox row that makes a ready task's dispatch durable; its dispatch id."""
        dispatch_id = new_id()
        self._tx.defer(
            "insert_outbox",
            {
                "dispatch_id": dispatch_id,
                "task_run_id": task_run_id,
                "task_key": task_key,
                "task_type": task_type,
                "fencing_token": fencing_token,
                "created_at": projector.row_time(at),
            },
        )
        self.enqueued = True
        return dispatch_id

    def enqueue_many(self, tasks: Sequence[tuple[UUID, str, str]], *, at: datetime) -> None:
        """:meth:`enqueue` for each of ``tasks`` (id, key, type; ready for the first time,
        token 0), in one statement run for all (``defer_many``)."""
        rows = [
            {
                "dispatch_id": new_id(),
                "task_run_id": task_run_id,
                "task_key": task_key,
                "task_type": task_type,
                "fencing_token": 0,
                "created_at": projector.row_time(at),
            }
            for task_run_id, task_key, task_type in tasks
        ]
        self._tx.defer_many("insert_outbox", rows)
        self.enqueued = True

    def redispatch(self, task: TaskRunRow, reason: str, *, at: datetime) -> UUID:
        """A new dispatch for a READY task whose dispatch was lost, with the reason the
        redispatch net gave it (``app/redispatch.py``); its dispatch id."""
        dispatch_id = new_id()
        self._tx.defer(
            "insert_redispatch",
            {
                "dispatch_id": dispatch_id,
                "task_run_id": task.id,
                "task_key": task.task_key,
                "task_type": task.task_type,
                "fencing_token": task.fencing_token,
                "created_at": projector.row_time(at),
                "reason": reason,
            },
        )
        self.enqueued = True
        return dispatch_id

    def pending(
        self,
        limit: int,
        task_types: Collection[str] | None = None,
        run_ids: Collection[UUID] | None = None,
        *,
        traced: bool = True,
    ) -> list[PendingOutboxRow]:
        """Up to ``limit`` unpublished rows, oldest first (each with its run's trace
        context if ``traced``, else none), locked for this transaction;
        on PostgreSQL a row another publisher holds is skipped. Only the dispatches of
        ``run_ids``, if given (the runs' task types are then not looked at: a runner
        scoped to runs was checked to have their handlers); else only of
        ``task_types``, if given."""
        own: dict[str, object] = {"limit": limit, "traced": traced}
        if run_ids is not None:
            params: dict[str, object] = {"run_ids": id_list(run_ids)}
            rows = self._tx.run("select_pending_outbox_of_runs", {**params, **own})
        elif task_types is not None:
            params = {"task_types": sorted(task_types)}
            rows = self._tx.run("select_pending_outbox_of_types", {**params, **own})
        else:
            rows = self._tx.run("select_pending_outbox", own)
        return [PendingOutboxRow.from_mapping(r) for r in rows]

    def mark_published(self, dispatch_ids: Collection[UUID]) -> None:
        """Mark a sweep's delivered dispatches published, all in one statement."""
        if dispatch_ids:
            self._tx.defer("mark_outbox_published", {"dispatch_ids": id_list(dispatch_ids)})

    def take_redispatch_net(self) -> bool:
        """Whether this transaction has the redispatch net to itself until it commits
        (False: another scheduler's pass holds it)."""
        return bool(self._tx.run("try_redispatch_net", {})[0]["taken"])

    def stalled_ready(
        self, older_than_seconds: float, limit: int, run_ids: Collection[UUID] | None = None
    ) -> list[TaskRunRow]:
        """Tasks READY for over ``older_than_seconds`` with no dispatch pending or
        published within that time (only of ``run_ids``, if given)."""
        params: dict[str, object] = {"older_than": older_than_seconds, "limit": limit}
        statement = "select_stalled_ready"
        if run_ids is not None:
            params["run_ids"] = id_list(run_ids)
            statement = "select_stalled_ready_of_runs"
        return [TaskRunRow.from_mapping(r) for r in self._tx.run(statement, params)]

    def stalled_of_type(
        self,
        task_type: str,
        older_than_seconds: float,
        limit: int,
        run_ids: Collection[UUID] | None = None,
    ) -> list[TaskRunRow]:
        """``stalled_ready`` of one task type, oldest first."""
        params: dict[str, object] = {
            "older_than": older_than_seconds,
            "limit": limit,
            "task_type": task_type,
        }
        statement = "select_stalled_ready_of_type"
        if run_ids is not None:
            params["run_ids"] = id_list(run_ids)
            statement = "select_stalled_ready_of_type_of_runs"
        return [TaskRunRow.from_mapping(r) for r in self._tx.run(statement, params)]
