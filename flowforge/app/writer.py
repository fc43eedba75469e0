"""The one rule, step by step, inside one open store transaction.

A :class:`Writer` wraps the store's :class:`~flowforge.projections.writes.Writes` for one
transaction. Each transition method is one step of the rule: the store's conditional
write on the current-state row with its event at the row's new version (``None``: lost,
nothing written; the store records the event, in the same statement on PostgreSQL),
then what follows from the row: the run's mark for a scheduler, and an outbox row when
the task became ready. The transaction commits all of it or none of it. Which SQL runs
is the store's business; this module decides what follows from a row.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.ids import new_id
from flowforge.aggregates.machines import (
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.rules import initial_task_run_state
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.projections.reads import RunCompletion
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import MOVE_EDGES, LeafSuccess, Writes

_READY = TaskRunState.READY
_CLAIM = TASK_RUN_MACHINE.get("claim")
_SCHEDULE_RETRY = TASK_RUN_MACHINE.get("schedule_retry")
_RETRY_READY = TASK_RUN_MACHINE.get("retry_ready")

#: Task edges after which the run has nothing new to do: no mark, no wake-up (a
#: heartbeat, not an edge, never marks either).
_LEAVE_RUN_ALONE = frozenset({_CLAIM.name})


class Writer:
    """The transitions of one open transaction, each with its event and outbox row.

    A transition that can change what its run should do next also marks the run for
    the scheduler (``Writes.mark_run``), in the same transaction: every task edge but
    the claim (which leaves the run nothing to do) and every run edge. The scheduler's
    own advance passes ``marks_runs=False``: it clears the run's marks and would only
    wake itself again.
    """

    def __init__(self, writes: Writes, *, marks_runs: bool = True) -> None:
        self.store = writes
        self.marks_runs = marks_runs
        #: Whether the transaction's last statement was sent (nothing may follow it).
        self.closed = False

    def now(self) -> datetime:
        return self.store.now()

    # --- task runs ---------------------------------------------------------------------

    def move_task(self, edge: Transition, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        return self._record_task(self.store.move_task(task_run_id, edge, actor=actor), edge)

    def claim(
        self,
        task_run_id: UUID,
        worker_id: str,
        lease_seconds: float | None,
        *,
        last: bool = False,
    ) -> TaskRunRow | None:
        """``last``: the transaction writes nothing after the claim (a claim leaves its
        run nothing to do and dispatches nothing), so PostgreSQL commits it in the
        claim's own round trip."""
        row = self.store.claim(task_run_id, worker_id, lease_seconds, last=last)
        return self._record_task(row, _CLAIM)

    def claims_with_runs(
        self,
        task_run_ids: Sequence[UUID],
        worker_id: str,
        known_runs: Collection[UUID],
        *,
        last: bool = False,
    ) -> tuple[list[TaskRunRow | None], list[WorkflowRunRow]]:
        """:meth:`claim` of each task with its row's own lease, and their runs unless
        known (``Writes.claims_with_runs``): each claimed row (``None``: lost), and the
        runs read."""
        rows, runs = self.store.claims_with_runs(task_run_ids, worker_id, known_runs, last=last)
        return [self._record_task(row, _CLAIM) for row in rows], runs

    def finish(
        self,
        edge: Transition,
        task_run_id: UUID,
        fencing_token: int,
        *,
        actor: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
    ) -> TaskRunRow | None:
        row = self.store.finish(
            task_run_id, edge, fencing_token, actor=actor, result=result, error=error
        )
        return self._record_task(row, edge)

    def finish_trying_run(
        self,
        edge: Transition,
        task_run_id: UUID,
        fencing_token: int,
        *,
        try_run: bool,
        actor: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
    ) -> tuple[WorkflowRunState | None, TaskRunRow | None]:
        """:meth:`finish`, after trying the run's row if ``try_run``
        (``Writes.finish_trying_run``); the run's state (``None``: not tried, or held
        elsewhere) and the new task row."""
        if not try_run:
            return None, self.finish(
                edge, task_run_id, fencing_token, actor=actor, result=result, error=error
            )
        run_state, row = self.store.finish_trying_run(
            task_run_id, edge, fencing_token, actor=actor, result=result, error=error
        )
        return run_state, self._record_task(row, edge)

    def succeed_leaves(
        self, successes: Sequence[LeafSuccess], *, actor: str
    ) -> list[TaskRunRow | None]:
        """The successes of tasks no other task depends on and all that can follow each
        (its run started, succeeded, or marked), in one round trip that ends the
        transaction (``Writes.succeed_leaves``); each new task row, or ``None``: lost."""
        rows = self.store.succeed_leaves(successes, actor=actor)
        self.closed = True
        return rows

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str,
        last: bool = False,
    ) -> TaskRunRow | None:
        """A heartbeat leaves its run nothing to do: ``last`` as for :meth:`claim`."""
        return self.store.renew_lease(
            task_run_id, fencing_token, lease_seconds, actor=actor, last=last
        )

    def reclaim(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        return self._record_task(self.store.reclaim(task_run_id, actor=actor), REAPER_TRANSITION)

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float, *, actor: str
    ) -> TaskRunRow | None:
        row = self.store.schedule_retry(task_run_id, delay_seconds, actor=actor)
        return self._record_task(row, _SCHEDULE_RETRY)

    def retry_ready(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        return self._record_task(self.store.retry_ready(task_run_id, actor=actor), _RETRY_READY)

    def take_task_edge(
        self, edge: Transition, task_run_id: UUID, *, actor: str, delay_seconds: float = 0.0
    ) -> TaskRunRow | None:
        """An edge that needs neither a lease nor a worker (``transition_task_run``)."""
        if edge.name in MOVE_EDGES:
            return self.move_task(edge, task_run_id, actor=actor)
        if edge.name == _SCHEDULE_RETRY.name:
            return self.schedule_retry(task_run_id, delay_seconds, actor=actor)
        if edge.name == _RETRY_READY.name:
            return self.retry_ready(task_run_id, actor=actor)
        raise ValueError(f"take_task_edge does not take {edge.name!r}")

    def _record_task(self, row: TaskRunRow | None, edge: Transition) -> TaskRunRow | None:
        """What follows a task's edge besides its event (which the store's conditional
        write stored): the run's mark, and the outbox row of a task that became ready."""
        if row is None:
            return None
        if self.marks_runs and edge.name not in _LEAVE_RUN_ALONE:
            self.store.mark_run(row.workflow_run_id, row.task_key)
        if row.state == _READY and edge.source != _READY:
            self.store.enqueue_dispatch(
                row.id, row.task_key, row.task_type, row.fencing_token, at=row.updated_at
            )
        return row

    # --- workflow runs -----------------------------------------------------------------

    def take_run_edge(
        self, edge: Transition, run_id: UUID, *, actor: str
    ) -> WorkflowRunRow | None:
        row = self.store.move_run(run_id, edge, actor=actor)
        return None if row is None else self._record_run(row)

    def start_run(self, run_id: UUID, *, actor: str) -> tuple[WorkflowRunRow | None, bool]:
        """The run's ``start`` edge and whether its tasks moved before (one round trip,
        ``Writes.start_run``); the new row, or ``None``."""
        row, moved = self.store.start_run(run_id, actor=actor)
        return None if row is None else self._record_run(row), moved

    def succeed_run_when_complete(
        self, run_id: UUID, *, actor: str, closing: str | None = None
    ) -> tuple[RunCompletion, WorkflowRunRow | None]:
        """The run's completion, and its ``succeed`` edge if complete, in one round trip
        (``Writes.succeed_run_when_complete``); the new row, or ``None``. ``closing``:
        the finished task's key; the run is marked for it unless settled, and the
        transaction ends there (``closed``)."""
        completion, row = self.store.succeed_run_when_complete(
            run_id, actor=actor, closing=closing
        )
        self.closed = closing is not None
        return completion, None if row is None else self._record_run(row)

    def cancel_run(self, run_id: UUID, *, actor: str) -> WorkflowRunRow | None:
        """Cancel a pending or running run in one conditional write; None if it is
        already terminal (or unknown). The event names the edge the row really took."""
        row = self.store.cancel_run(run_id, actor=actor)
        return None if row is None else self._record_run(row)

    def _record_run(self, row: WorkflowRunRow) -> WorkflowRunRow:
        """What follows a run's edge besides its event (which the store stored): its mark."""
        if self.marks_runs:
            self.store.mark_run(row.id)
        return row

    def create_run(
        self,
        definition: WorkflowDefinition,
        inputs: dict[str, Any],
        *,
        idempotency_key: str | None,
        actor: str,
    ) -> tuple[UUID, bool]:
        """Create the run and its task runs; ``(id, False)`` if the key already exists."""
        at, run_id = self.store.creation_time(), new_id()
        created = workflow_run.created_event(
            run_id,
            at=at,
            workflow_name=definition.name,
            definition=definition.to_dict(),
            inputs=inputs,
            idempotency_key=idempotency_key,
            actor=actor,
        )
        if not self.store.insert_workflow_run(created):
            assert idempotency_key is not None  # only a key can conflict
            return self.store.run_id_by_idempotency_key(idempotency_key), False
        self.store.append([created])
        for task in definition.tasks:
            self._create_task(run_id, definition, task.key, at=at, actor=actor)
        return run_id, True

    def _create_task(
        self, run_id: UUID, definition: WorkflowDefinition, key: str, *, at: datetime, actor: str
    ) -> None:
        task = definition.task(key)
        state = initial_task_run_state(len(task.depends_on))
        event = task_run.created_event(
            new_id(),
            at=at,
            workflow_run_id=run_id,
            task_key=task.key,
            task_type=task.type,
            depends_on=list(task.depends_on),
            max_attempts=definition.retry_policy_for(key).max_attempts,
            lease_seconds=definition.lease_seconds_for(key),
            state=state,
            actor=actor,
        )
        self.store.insert_task_run(event)
        self.store.append([event])
        if state is TaskRunState.READY:
            self.store.enqueue_dispatch(event.originator_id, task.key, task.type, 0, at=at)
