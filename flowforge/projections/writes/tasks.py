"""A task run's writes: one conditional write per edge, with all that follows it.

Each edge is ONE conditional write on the task's row (the new row, computed by the
database with its clock and its token, or ``None`` when the row did not match: a lost
race or a stale token, nothing written), its event (``recording.py``), and what follows
from the new row in the same transaction: the run's mark for a scheduler, and an outbox
row when the task became ready. Legality is not checked here: the application checks it
against the pure machine before it opens a transaction. ``last``: nothing follows in
this transaction, so PostgreSQL sends the COMMIT with the statement.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from flowforge.aggregates import lost_workers, task_run
from flowforge.aggregates.machines import (
    CARRY_OVER_TRANSITION,
    FINISH_TRANSITIONS,
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import TaskRun
from flowforge.projections import projector
from flowforge.projections.db.protocols import Row
from flowforge.projections.reads import first_row, id_list, runs_of_tasks_unless_known
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import elements
from flowforge.projections.writes.concurrency_limits import LimitWrites
from flowforge.projections.writes.edges import (
    CLAIM,
    FAIL_TASK,
    RETRY_READY,
    RUNNING,
    SCHEDULE_RETRY,
    START_RUN,
)
from flowforge.projections.writes.marks import RunMarks
from flowforge.projections.writes.outbox import OutboxWrites
from flowforge.projections.writes.recording import EventRecipe, Recording, Statement

#: The edge that makes a pending task ready once its dependencies are done.
PROMOTE = "dependencies_satisfied"
_PROMOTE_EDGE = TASK_RUN_MACHINE.get(PROMOTE)
#: The edges ``move`` takes: no lease, no token; the promotion alone has a clock
#: condition, its run's start time (``task_move``).
MOVE_EDGES = frozenset(
    {
        PROMOTE,
        "cancel_pending",
        "cancel_ready",
        "cancel_failed",
        "cancel_retrying",
    }
)
FINISH_EDGES = frozenset(FINISH_TRANSITIONS)
_READY = TaskRunState.READY
#: The one edge out of ``ready`` besides a claim (which drops its hold itself): a
#: cancelled task's held dispatch, if a limit held it, goes with it.
_CANCEL_READY = "cancel_ready"
#: Task edges after which the run has nothing new to do: no mark, no wake-up (a
#: heartbeat, not an edge, never marks either).
_LEAVE_RUN_ALONE = frozenset({CLAIM.name})

#: Which method takes each TaskRun edge: every edge has exactly one.
TASK_EDGE_METHODS: Mapping[str, str] = {
    **dict.fromkeys(MOVE_EDGES, "move"),
    **dict.fromkeys(FINISH_EDGES, "finish"),
    CLAIM.name: "claim",
    REAPER_TRANSITION.name: "reclaim",
    SCHEDULE_RETRY.name: "schedule_retry",
    RETRY_READY.name: "retry_ready",
    CARRY_OVER_TRANSITION.name: "carry_over",
}
if set(TASK_EDGE_METHODS) != {t.name for t in TASK_RUN_MACHINE}:
    raise ValueError("every TaskRun edge needs exactly one conditional write")


class TaskWrites:
    """The task-run edges of one write transaction."""

    def __init__(
        self, recording: Recording, marks: RunMarks, outbox: OutboxWrites, limits: LimitWrites
    ) -> None:
        self._recording = recording
        self._tx = recording.tx
        self._marks = marks
        self._outbox = outbox
        self._limits = limits

    def create(self, event: TaskRun.Created) -> None:
        """A new task run's row and event, and its dispatch if it starts ready."""
        projector.apply_event(self._tx, event)
        self._recording.append([event])
        if event.state == _READY.value:
            at = event.timestamp
            self._outbox.enqueue(event.originator_id, event.task_key, event.task_type, 0, at=at)

    def create_many(self, events: Sequence[TaskRun.Created]) -> None:
        """:meth:`create` for each: a mapped task's elements (``elements.py``)."""
        elements.create_elements(self._recording, self._outbox, self.create, events)

    def carry_over(self, event: TaskRun.ResultCarriedOver) -> None:
        """A rerun's task created just before in this transaction (:meth:`create`, in
        ``pending``) takes its carried-over result: the event, built by the pure
        aggregate, is applied to the row as the rebuild applies it. No conditional write
        can lose here (no other transaction can see the row yet), so none is needed;
        a row not at version 1 in ``pending`` is corruption and raises."""
        if CARRY_OVER_TRANSITION.name != event.TRANSITION:
            raise ValueError(f"carry_over takes a carry-over event, not {event.TRANSITION!r}")
        projector.apply_event(self._tx, event)
        self._recording.append([event])

    def move(
        self,
        task_run_id: UUID,
        edge: Transition,
        *,
        actor: str,
        error: Mapping[str, str] | None = None,
    ) -> TaskRunRow | None:
        """dependencies_satisfied (not before its run's start time), cancel_pending,
        cancel_ready, cancel_failed or cancel_retrying. ``error``: a cancel's cause
        (``aggregates.cancel_cause``), written in the row and its event; ``None``: the
        row's error is kept."""
        if edge.name not in MOVE_EDGES:
            raise ValueError(f"move takes {sorted(MOVE_EDGES)}, not {edge.name!r}")
        event = EventRecipe.of_task(edge, actor, {"error": error} if error else None)
        own = {"promotes": edge.name == PROMOTE, "error": error}
        params = task_params(task_run_id, edge, own)
        return self._followed(self._task("task_move", params, event), edge)

    def promote(self, tasks: Sequence[TaskRunRow], *, actor: str) -> dict[UUID, TaskRunRow]:
        """dependencies_satisfied for each of ``tasks`` (pending rows of one run whose
        row this transaction holds); the new rows of those promoted, by id. On
        PostgreSQL, two or more in ONE statement that also writes their events,
        dispatches and marks (``task_promote_many``); else :meth:`move` for each."""
        if len(tasks) < 2 or not self._recording.events_in_sql:
            moved = {task.id: self.move(task.id, _PROMOTE_EDGE, actor=actor) for task in tasks}
            return {task_run_id: row for task_run_id, row in moved.items() if row is not None}
        params = {
            "task_run_ids": id_list([task.id for task in tasks]),
            "source": _PROMOTE_EDGE.source.value,
            "target": _PROMOTE_EDGE.target.value,
            "mark_runs": self._marks.after_edges,
        }
        event = EventRecipe.of_task(_PROMOTE_EDGE, actor)
        rows = self._tx.run(*self._recording.statement("task_promote_many", params, event))
        by_id = {task.id: task for task in tasks}
        promoted = {
            row["id"]: replace(
                by_id[row["id"]],
                state=row["state"],
                version=row["version"],
                updated_at=row["updated_at"],
                retry_due_at=None,
            )
            for row in rows
        }
        self._recording.recorded_many(event, len(promoted))
        if promoted:
            self._outbox.enqueued = True
            self._marks.made = self._marks.made or self._marks.after_edges
        return promoted

    def claim(
        self,
        task_run_id: UUID,
        worker_id: str,
        lease_seconds: float | None,
        *,
        last: bool = False,
    ) -> TaskRunRow | None:
        """READY to RUNNING: token + 1, a lease from the database's now (``None``: the
        row's own lease, the definition's); the run started too if no one has yet."""
        claim = EventRecipe.of_task(CLAIM, worker_id)
        start = EventRecipe.of_run(START_RUN, worker_id)
        statements = self._claim_statements(task_run_id, worker_id, lease_seconds, claim, start)
        claim_rows, start_rows = self._tx.run_each(
            statements, commit=self._recording.commits(last), unread=self._unread_starts(1)
        )
        row = self._recording.recorded(TaskRunRow, claim_rows, claim)
        self._recording.recorded(WorkflowRunRow, start_rows, start)
        return row

    def claims_with_runs(
        self,
        task_run_ids: Sequence[UUID],
        worker_id: str,
        known_runs: Collection[UUID],
        *,
        last: bool = False,
    ) -> tuple[list[TaskRunRow | None], list[WorkflowRunRow]]:
        """:meth:`claim` of each task with its row's own lease, and the runs of the
        tasks (claimed or not, each once) unless their id is in ``known_runs``, all in
        ONE round trip (with the COMMIT if ``last``): a worker's whole read before
        running its tasks. Each claim is its own conditional write with its own event;
        one that loses (``None``) leaves the others alone. The rows are claimed in the
        order of their ids, so two batches that share tasks wait for each other rather
        than deadlock; they are returned in the order given."""
        event = EventRecipe.of_task(CLAIM, worker_id)
        start = EventRecipe.of_run(START_RUN, worker_id)
        in_lock_order = sorted(task_run_ids)
        statements = [
            statement
            for task_run_id in in_lock_order
            for statement in self._claim_statements(task_run_id, worker_id, None, event, start)
        ]
        statements.append(runs_of_tasks_unless_known(task_run_ids, known_runs))
        *rows, run_rows = self._tx.run_each(
            statements,
            commit=self._recording.commits(last),
            unread=self._unread_starts(len(in_lock_order)),
        )
        claimed = {
            task_run_id: self._recording.recorded(TaskRunRow, claim_rows, event)
            for task_run_id, claim_rows in zip(in_lock_order, rows[::2], strict=True)
        }
        for start_rows in rows[1::2]:
            self._recording.recorded(WorkflowRunRow, start_rows, start)
        runs = [WorkflowRunRow.from_mapping(row) for row in run_rows]
        return [claimed[task_run_id] for task_run_id in task_run_ids], runs

    def lock_unfinished_of_run(self, run_id: UUID) -> list[TaskRunRow]:
        """The run's unfinished tasks as they are, each row locked until the commit, in
        id order: an ended run's advance takes them all before the first cancel frees a
        concurrency limit's slot (task rows before counter rows: the lock order)."""
        rows = self._tx.run("lock_unfinished_task_runs_of_run", {"workflow_run_id": run_id})
        return [TaskRunRow.from_mapping(row) for row in rows]

    def finish(
        self,
        task_run_id: UUID,
        edge: Transition,
        fencing_token: int,
        *,
        actor: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
    ) -> TaskRunRow | None:
        """succeed, fail or cancel_running, only with the current fencing token."""
        params = finish_params(task_run_id, edge, fencing_token, result, error)
        event = EventRecipe.of_task(edge, actor, {"result": result, "error": error})
        return self._followed(self._task("task_finish", params, event), edge)

    def finish_trying_run(
        self,
        task_run_id: UUID,
        edge: Transition,
        fencing_token: int,
        *,
        try_run: bool,
        actor: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
    ) -> tuple[WorkflowRunState | None, TaskRunRow | None]:
        """:meth:`finish`, after trying the row of the task's run like
        ``RunWrites.try_lock_state`` if ``try_run``, in ONE round trip (neither needs the
        other's rows): the run's state (``None``: not tried, or another transaction holds
        the row) and the new task row (``None``: lost). The run row first: the lock
        order of every advance."""
        if not try_run:
            row = self.finish(
                task_run_id, edge, fencing_token, actor=actor, result=result, error=error
            )
            return None, row
        params = finish_params(task_run_id, edge, fencing_token, result, error)
        event = EventRecipe.of_task(edge, actor, {"result": result, "error": error})
        run_rows, task_rows = self._tx.run_each(
            [
                ("try_lock_workflow_run_of_task", {"id": task_run_id}),
                self._recording.statement("task_finish", params, event),
            ]
        )
        row = self._recording.recorded(TaskRunRow, task_rows, event)
        return run_state_of(run_rows), self._followed(row, edge)

    def time_out(
        self, task_run_id: UUID, fencing_token: int, error: Mapping[str, str], *, actor: str
    ) -> TaskRunRow | None:
        """The fail edge for the attempt holding ``fencing_token``, only once its deadline
        has passed by the database's clock (the execution timeout)."""
        params = finish_params(task_run_id, FAIL_TASK, fencing_token, None, error)
        event = EventRecipe.of_task(FAIL_TASK, actor, {"result": None, "error": error})
        return self._followed(self._task("task_time_out", params, event), FAIL_TASK)

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str,
        last: bool = False,
    ) -> TaskRunRow | None:
        """Extend a running task's lease from the database's now (a heartbeat: not an
        edge, so its run has nothing new to do)."""
        params = {
            "id": task_run_id,
            "source": RUNNING,
            "fencing_token": fencing_token,
            "lease_seconds": lease_seconds,
        }
        event = EventRecipe(task_run.DECLARATION, TaskRun.LeaseRenewed, RUNNING, actor)
        return self._task("task_renew_lease", params, event, last=last)

    def reclaim(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        """The reaper's edge: only once the lease expired by the database's clock. Below
        the task's bound of lost workers, ``reap_lease`` (back to ready); at it, the fail
        edge with a ``WorkerLost`` error, tried only when the first write matched nothing
        and the row, read in this transaction, is at the bound (the common reclaim costs
        one statement, as before). Either way the token moves on and the loss counts."""
        event = EventRecipe.of_task(REAPER_TRANSITION, actor)
        row = self._task("task_reclaim", task_params(task_run_id, REAPER_TRANSITION), event)
        if row is not None:
            return self._followed(row, REAPER_TRANSITION)
        current = first_row(TaskRunRow, self._tx.run("select_task_run", {"id": task_run_id}))
        if current is None or current.state != RUNNING:
            return None
        losses = current.worker_losses + 1
        if not lost_workers.loses_for_good(losses, current.max_worker_losses):
            return None  # lost the race, or the lease has not expired
        error = lost_workers.worker_lost_error(losses, current.max_worker_losses)
        own = {"fencing_token": current.fencing_token, "worker_losses": current.worker_losses}
        params = finish_params(task_run_id, FAIL_TASK, current.fencing_token, None, error)
        written = {"result": None, "error": error}
        failing = EventRecipe.of_task(FAIL_TASK, actor, written)
        row = self._task("task_reclaim_failing", {**params, **own}, failing)
        return self._followed(row, FAIL_TASK)

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float, *, actor: str
    ) -> TaskRunRow | None:
        """FAILED to RETRYING with attempts left; due ``delay_seconds`` from now."""
        params = task_params(task_run_id, SCHEDULE_RETRY, {"delay_seconds": delay_seconds})
        event = EventRecipe.of_task(SCHEDULE_RETRY, actor)
        return self._followed(self._task("task_schedule_retry", params, event), SCHEDULE_RETRY)

    def retry_ready(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        """RETRYING to READY once the retry is due by the database's clock."""
        event = EventRecipe.of_task(RETRY_READY, actor)
        row = self._task("task_retry_ready", task_params(task_run_id, RETRY_READY), event)
        return self._followed(row, RETRY_READY)

    def take_edge(
        self, edge: Transition, task_run_id: UUID, *, actor: str, delay_seconds: float = 0.0
    ) -> TaskRunRow | None:
        """An edge that needs neither a lease nor a worker (``transition_task_run``)."""
        if edge.name in MOVE_EDGES:
            return self.move(task_run_id, edge, actor=actor)
        if edge.name == SCHEDULE_RETRY.name:
            return self.schedule_retry(task_run_id, delay_seconds, actor=actor)
        if edge.name == RETRY_READY.name:
            return self.retry_ready(task_run_id, actor=actor)
        raise ValueError(f"take_edge does not take {edge.name!r}")

    def _claim_statements(
        self,
        task_run_id: UUID,
        worker_id: str,
        lease_seconds: float | None,
        claim: EventRecipe,
        start: EventRecipe,
    ) -> list[Statement]:
        """A claim, then its run's start if no one has started the run yet
        (``run_start_after_claim``): a run is running once a task of it is."""
        params = {"worker_id": worker_id, "lease_seconds": lease_seconds}
        start_params = {
            "task_run_id": task_run_id,
            "source": START_RUN.source.value,
            "target": START_RUN.target.value,
            "claimed": RUNNING,
        }
        return [
            self._recording.statement(
                "task_claim", task_params(task_run_id, CLAIM, params), claim
            ),
            self._recording.statement("run_start_after_claim", start_params, start),
        ]

    def _unread_starts(self, claims: int) -> list[int]:
        """The positions of the runs' starts among ``claims`` claims' statements, whose
        rows nobody reads where the statement stored the event (SQLite builds it from
        the row)."""
        return self._recording.unread_where_stored([2 * i + 1 for i in range(claims)])

    def _task(
        self, name: str, params: dict[str, Any], event: EventRecipe, *, last: bool = False
    ) -> TaskRunRow | None:
        statement, values = self._recording.statement(name, params, event)
        rows = self._tx.run(statement, values, commit=self._recording.commits(last))
        return self._recording.recorded(TaskRunRow, rows, event)

    def _followed(self, row: TaskRunRow | None, edge: Transition) -> TaskRunRow | None:
        """What follows a won edge besides its event: the run's mark, the slots of a task
        that left running (the hold of one cancelled while ready), and the outbox row of
        a task that became ready."""
        if row is None:
            return None
        if edge.source.value == RUNNING:
            self._limits.free(row)
        elif edge.name == _CANCEL_READY:
            self._limits.drop_hold(row.id)
        if edge.name not in _LEAVE_RUN_ALONE:
            self._marks.after_edge(row.workflow_run_id, row.task_key)
        if row.state == _READY and edge.source != _READY:
            self._outbox.enqueue(
                row.id, row.task_key, row.task_type, row.fencing_token, at=row.updated_at
            )
        return row


def task_params(
    task_run_id: UUID, edge: Transition, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A task edge's parameters: the row, the edge's ends, and the edge's own."""
    return {
        "id": task_run_id,
        "source": edge.source.value,
        "target": edge.target.value,
        "terminal": TASK_RUN_MACHINE.is_terminal(edge.target),
        **(params or {}),
    }


def finish_params(
    task_run_id: UUID,
    edge: Transition,
    fencing_token: int,
    result: Any,
    error: Mapping[str, str] | None,
) -> dict[str, Any]:
    if edge.name not in FINISH_EDGES:
        raise ValueError(f"finish takes {sorted(FINISH_EDGES)}, not {edge.name!r}")
    own = {"fencing_token": fencing_token, "result": result, "error": error}
    return task_params(task_run_id, edge, own)


def run_state_of(rows: list[Row]) -> WorkflowRunState | None:
    """The state a run-locking query returned; ``None`` for no row (held, or no run)."""
    return WorkflowRunState(rows[0]["state"]) if rows else None
