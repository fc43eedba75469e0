"""The store's writes: one method per statement, in the domain's words.

:class:`Writes` wraps one open write transaction (``Store.write``). Each transition is
one method running ONE conditional write: the new row (computed by the database, with its
clock and its token), or ``None`` when the row did not match (a lost race or a stale
token; nothing was written). Legality is not checked here: the application checks it
against the pure machine before it opens a transaction. A transition's event is stored
in the ``eventsourcing`` library's table in the same transaction: on PostgreSQL by the
transition's own statement (``event_sql``), otherwise built from the returned row and
inserted through the library's mapper.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.base import Declaration, TransitionedEvent, event_from_row
from flowforge.aggregates.ids import new_id
from flowforge.aggregates.machines import (
    FINISH_TRANSITIONS,
    REAPER_TRANSITION,
    TASK_RUN_MACHINE,
    WORKFLOW_RUN_MACHINE,
    Transition,
)
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.projections import event_sql, projector, queries
from flowforge.projections.db.protocols import Row, Transaction
from flowforge.projections.reads import (
    Reads,
    RunCompletion,
    first_row,
    id_list,
    runs_of_tasks_unless_known,
)
from flowforge.projections.tables import OutboxRow, TaskRunRow, WorkflowRunRow

#: The edges ``move_task`` takes: no lease, no token, no clock condition.
MOVE_EDGES = frozenset({"dependencies_satisfied", "cancel_pending", "cancel_ready"})
_CLAIM = TASK_RUN_MACHINE.get("claim")
_SCHEDULE_RETRY = TASK_RUN_MACHINE.get("schedule_retry")
_RETRY_READY = TASK_RUN_MACHINE.get("retry_ready")
#: The edges ``start_run`` and ``succeed_run_when_complete`` take.
START_RUN = WORKFLOW_RUN_MACHINE.get("start")
SUCCEED_RUN = WORKFLOW_RUN_MACHINE.get("succeed")
SUCCEED_TASK = TASK_RUN_MACHINE.get("succeed")
_FINISH_EDGES = frozenset(FINISH_TRANSITIONS)
_RUNNING = TaskRunState.RUNNING.value

_Recorded = TypeVar("_Recorded", TaskRunRow, WorkflowRunRow)
#: A user's cancel takes one of two edges, decided by the row's state when it is written.
_CANCEL_RUN_FROM: Mapping[WorkflowRunState, Transition] = {
    WorkflowRunState.PENDING: WORKFLOW_RUN_MACHINE.get("cancel_before_start"),
    WorkflowRunState.RUNNING: WORKFLOW_RUN_MACHINE.get("cancel"),
}
if {e.target for e in _CANCEL_RUN_FROM.values()} != {WorkflowRunState.CANCELLED}:
    raise ValueError("a user's cancel must end in cancelled")

#: Which method takes each TaskRun edge: every edge has exactly one.
TASK_EDGE_METHODS: Mapping[str, str] = {
    **dict.fromkeys(MOVE_EDGES, "move_task"),
    **dict.fromkeys(_FINISH_EDGES, "finish"),
    _CLAIM.name: "claim",
    REAPER_TRANSITION.name: "reclaim",
    _SCHEDULE_RETRY.name: "schedule_retry",
    _RETRY_READY.name: "retry_ready",
}
if set(TASK_EDGE_METHODS) != {t.name for t in TASK_RUN_MACHINE}:
    raise ValueError("every TaskRun edge needs exactly one conditional write")


class Writes(Reads):
    """The writes of one open transaction; it commits all of them or none."""

    def __init__(self, tx: Transaction, mapper: Mapper[UUID], *, events_in_sql: bool) -> None:
        super().__init__(tx)
        self._mapper = mapper
        #: Whether a task transition's statement stores its event itself (PostgreSQL,
        #: with the library's plain JSON mapper: ``event_sql``) or this class appends the
        #: event built in Python after it (SQLite).
        self.events_in_sql = events_in_sql
        #: What this transaction leaves for other loops (the store rings after commit).
        self.marked_runs = False
        self.enqueued = False

    # --- the event log ---------------------------------------------------------------

    def append(self, events: Sequence[DomainEventProtocol[UUID]]) -> None:
        """Store events in the library's table. Its primary key (originator_id,
        originator_version) is the second guard: two events can never claim the same
        version of one aggregate."""
        for event in events:
            stored = self._mapper.to_stored_event(event)
            params = {
                "originator_id": stored.originator_id,
                "originator_version": stored.originator_version,
                "topic": stored.topic,
            }
            if getattr(event, "timestamp", None) != projector.TRANSACTION_NOW:
                self._tx.defer("insert_stored_event", {**params, "state": stored.state})
                continue
            stamp = _transaction_now_stamp(self._mapper.transcoder)
            head, tail = _around_transaction_now(stored.state, stamp)
            self._tx.defer(
                "insert_stored_event_at_now", {**params, "state_head": head, "state_tail": tail}
            )

    def creation_time(self) -> datetime:
        """The time to create runs at: the database's clock. Where SQL builds events
        (PostgreSQL) that is the transaction's own now(), written by SQL in the rows
        and events (``projector.TRANSACTION_NOW``): no round trip to ask it first."""
        return projector.TRANSACTION_NOW if self.events_in_sql else self.now()

    def stored_events(self) -> list[StoredEvent]:
        """Every stored event, in the order the log recorded them."""
        return [
            StoredEvent(
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in self._tx.run("select_stored_events")
        ]

    # --- creation and the rebuild ----------------------------------------------------

    def insert_workflow_run(self, created: WorkflowRun.Created) -> bool:
        """The run's row; False (nothing written) if its idempotency key exists."""
        return projector.apply_event(self._tx, created)

    def run_id_by_idempotency_key(self, idempotency_key: str) -> UUID:
        (row,) = self._tx.run(
            "select_run_by_idempotency_key", {"idempotency_key": idempotency_key}
        )
        run_id: UUID = row["id"]
        return run_id

    def insert_task_run(self, created: TaskRun.Created) -> None:
        projector.apply_event(self._tx, created)

    def delete_projections(self) -> None:
        self._tx.run("delete_task_runs")
        self._tx.run("delete_workflow_runs")

    def apply(self, event: DomainEventProtocol[UUID]) -> None:
        """Apply one event of the log to the rows (the rebuild)."""
        projector.apply_event(self._tx, event)

    def fill_missing_task_leases(self) -> None:
        """Give task rows rebuilt from creation events stored before a task's lease was
        recorded (migration 5) the lease of their run's definition."""
        self._tx.run("fill_missing_task_leases")

    # --- task runs: one conditional write per transition -----------------------------
    # Each stores its event too (``_Event``): on PostgreSQL in the same statement,
    # on SQLite right after it. ``last``: nothing follows in this transaction, so
    # PostgreSQL sends the COMMIT with the statement (``Transaction.run``).

    def move_task(self, task_run_id: UUID, edge: Transition, *, actor: str) -> TaskRunRow | None:
        """dependencies_satisfied, cancel_pending or cancel_ready."""
        if edge.name not in MOVE_EDGES:
            raise ValueError(f"move_task takes {sorted(MOVE_EDGES)}, not {edge.name!r}")
        return self._task(
            "task_move", _task_params(task_run_id, edge), _Event.of_task(edge, actor)
        )

    def claim(
        self,
        task_run_id: UUID,
        worker_id: str,
        lease_seconds: float | None,
        *,
        last: bool = False,
    ) -> TaskRunRow | None:
        """READY to RUNNING: token + 1, a lease from the database's now (``None``: the
        row's own lease, the definition's)."""
        claim, start = _Event.of_task(_CLAIM, worker_id), _Event.of_run(START_RUN, worker_id)
        statements = self._claim_statements(task_run_id, worker_id, lease_seconds, claim, start)
        claim_rows, start_rows = self._tx.run_each(
            statements, commit=self._commits(last), unread=self._unread_starts(1)
        )
        row = self._recorded(TaskRunRow, claim_rows, claim)
        self._recorded(WorkflowRunRow, start_rows, start)
        return row

    def _claim_statements(
        self,
        task_run_id: UUID,
        worker_id: str,
        lease_seconds: float | None,
        claim: _Event,
        start: _Event,
    ) -> list[tuple[str, dict[str, Any]]]:
        """A claim, then its run's start if no one has started the run yet
        (``run_start_after_claim``): a run is running once a task of it is."""
        params = {"worker_id": worker_id, "lease_seconds": lease_seconds}
        start_params = {
            "task_run_id": task_run_id,
            "source": START_RUN.source.value,
            "target": START_RUN.target.value,
            "claimed": _RUNNING,
        }
        return [
            self._statement("task_claim", _task_params(task_run_id, _CLAIM, params), claim),
            self._statement("run_start_after_claim", start_params, start),
        ]

    def _unread_starts(self, claims: int) -> list[int]:
        """The positions of the runs' starts among ``claims`` claims' statements, whose
        rows nobody reads where the statement stored the event (SQLite builds it from
        the row)."""
        return [2 * i + 1 for i in range(claims)] if self.events_in_sql else []

    def claim_with_run(
        self,
        task_run_id: UUID,
        worker_id: str,
        known_runs: Collection[UUID],
        *,
        last: bool = False,
    ) -> tuple[TaskRunRow | None, WorkflowRunRow | None]:
        """:meth:`claim` with the row's own lease, and the task's run unless its id is
        in ``known_runs`` (as ``Reads.task_run_and_its_run``), in ONE round trip: a
        worker's whole read before running a task. The run is read after the claim,
        whether or not it won (a run row never changes what a claim does)."""
        (row,), runs = self.claims_with_runs([task_run_id], worker_id, known_runs, last=last)
        return row, next(iter(runs), None)

    def claims_with_runs(
        self,
        task_run_ids: Sequence[UUID],
        worker_id: str,
        known_runs: Collection[UUID],
        *,
        last: bool = False,
    ) -> tuple[list[TaskRunRow | None], list[WorkflowRunRow]]:
        """:meth:`claim_with_run` for each task, all in ONE round trip (with the COMMIT
        if ``last``): a worker's batch. Each claim is its own conditional write with its
        own event; one that loses leaves the others alone. The claimed rows (``None``:
        lost) in the order given, and the runs of the tasks, each once, unless known.
        The rows are claimed in the order of their ids, so two batches that share tasks
        wait for each other rather than deadlock."""
        event, start = _Event.of_task(_CLAIM, worker_id), _Event.of_run(START_RUN, worker_id)
        in_lock_order = sorted(task_run_ids)
        statements = [
            statement
            for task_run_id in in_lock_order
            for statement in self._claim_statements(task_run_id, worker_id, None, event, start)
        ]
        statements.append(runs_of_tasks_unless_known(task_run_ids, known_runs))
        *rows, run_rows = self._tx.run_each(
            statements,
            commit=self._commits(last),
            unread=self._unread_starts(len(in_lock_order)),
        )
        claimed = {
            task_run_id: self._recorded(TaskRunRow, claim_rows, event)
            for task_run_id, claim_rows in zip(in_lock_order, rows[::2], strict=True)
        }
        for start_rows in rows[1::2]:
            self._recorded(WorkflowRunRow, start_rows, start)
        runs = [WorkflowRunRow.from_mapping(row) for row in run_rows]
        return [claimed[task_run_id] for task_run_id in task_run_ids], runs

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
        params = _finish_params(task_run_id, edge, fencing_token, result, error)
        event = _Event.of_task(edge, actor, {"result": result, "error": error})
        return self._task("task_finish", params, event)

    def finish_trying_run(
        self,
        task_run_id: UUID,
        edge: Transition,
        fencing_token: int,
        *,
        actor: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
    ) -> tuple[WorkflowRunState | None, TaskRunRow | None]:
        """:meth:`finish`, after trying the row of the task's run like
        :meth:`try_lock_run_state`, in ONE round trip (neither needs the other's rows):
        the run's state (``None``: another transaction holds the row) and the new task
        row (``None``: lost). The run row first: the lock order of every advance."""
        params = _finish_params(task_run_id, edge, fencing_token, result, error)
        event = _Event.of_task(edge, actor, {"result": result, "error": error})
        run_rows, task_rows = self._tx.run_each(
            [
                ("try_lock_workflow_run_of_task", {"id": task_run_id}),
                self._statement("task_finish", params, event),
            ]
        )
        return _run_state(run_rows), self._recorded(TaskRunRow, task_rows, event)

    def succeed_leaf(
        self,
        task_run_id: UUID,
        fencing_token: int,
        leaf: Leaf,
        *,
        actor: str,
        result: Any = None,
    ) -> TaskRunRow | None:
        """A success of a task no other task depends on, and everything that can follow
        it, in ONE round trip with the COMMIT (PostgreSQL with its events in SQL only):
        the run row tried, the finish, then the run started if its claim could not, the run
        succeeded if every task has, and the run's mark for a scheduler unless settled;
        the three after the finish act only if it won and the run row is held here
        (``run_start_after_finish`` in postgres.sql says how). The new task row
        (``None``: lost, nothing written). The same outcome as :meth:`finish_trying_run`
        then ``advance.advance_after_finish``, which take two round trips or more."""
        success = LeafSuccess(task_run_id, fencing_token, leaf, result)
        (row,) = self.succeed_leaves([success], actor=actor)
        return row

    def succeed_leaves(
        self, successes: Sequence[LeafSuccess], *, actor: str
    ) -> list[TaskRunRow | None]:
        """:meth:`succeed_leaf` for each, all in ONE round trip with the COMMIT: a
        worker's batch. Each success is guarded on its own, and each statement sees the
        ones before it, so two leaves of one run in one batch settle the run once (the
        first holds the run row; the last finds every task done). Task rows are written
        in the order of their ids, as :meth:`claims_with_runs` claims them."""
        if not self.events_in_sql:
            raise TypeError("succeed_leaves needs a store that builds its events in SQL")
        if not successes:
            return []
        statements: list[tuple[str, dict[str, Any]]] = []
        finishes: list[_Event] = []
        in_lock_order = sorted(successes, key=lambda success: success.task_run_id)
        for success in in_lock_order:
            finish = _Event.of_task(SUCCEED_TASK, actor, {"result": success.result, "error": None})
            finishes.append(finish)
            statements += self._leaf_success_statements(success, finish, actor)
        per = len(statements) // len(successes)
        # Only the finish's and the mark's rows are read: not the run rows the start and
        # the success return (their definitions are most of the loading).
        unread = [i for i in range(len(statements)) if i % per not in _LEAF_ROWS_READ]
        rows = self._tx.run_each(statements, commit=True, unread=unread)
        groups = [rows[i : i + per] for i in range(0, len(rows), per)]
        if any(group[-1] for group in groups):  # the mark's rows: a scheduler's to do
            self.marked_runs = True
        finished = {
            success.task_run_id: self._recorded(TaskRunRow, group[1], finish)
            for success, group, finish in zip(in_lock_order, groups, finishes, strict=True)
        }
        return [finished[success.task_run_id] for success in successes]

    def _leaf_success_statements(
        self, success: LeafSuccess, finish: _Event, actor: str
    ) -> list[tuple[str, dict[str, Any]]]:
        """One leaf's success: the run row tried, the finish, then the run's start,
        success and mark, each guarded by the finish having won here (postgres.sql)."""
        task_run_id, leaf = success.task_run_id, success.leaf
        start, succeed = _Event.of_run(START_RUN, actor), _Event.of_run(SUCCEED_RUN, actor)
        guard = {"task_run_id": task_run_id}
        mark = {
            **guard,
            "id": leaf.run_id,
            "task_key": leaf.task_key,
            "succeeded": SUCCEED_RUN.target.value,
            "running": WorkflowRunState.RUNNING.value,
        }
        finish_params = _finish_params(
            task_run_id, SUCCEED_TASK, success.fencing_token, success.result, None
        )
        start_params = {**_run_params(leaf.run_id, START_RUN), **guard}
        succeed_params = {**_run_params(leaf.run_id, SUCCEED_RUN), **guard}
        # Keep _LEAF_ROWS_READ in step with this order.
        return [
            ("try_lock_workflow_run_of_task", {"id": task_run_id}),
            self._statement("task_finish", finish_params, finish),
            self._statement("run_start_after_finish", start_params, start),
            self._statement("run_succeed_after_finish", succeed_params, succeed),
            ("mark_run_wakeup_after_finish", mark),
        ]

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str,
        last: bool = False,
    ) -> TaskRunRow | None:
        """Extend a running task's lease from the database's now (a heartbeat)."""
        params = {
            "id": task_run_id,
            "source": _RUNNING,
            "fencing_token": fencing_token,
            "lease_seconds": lease_seconds,
        }
        event = _Event(task_run.DECLARATION, TaskRun.LeaseRenewed, _RUNNING, actor)
        return self._task("task_renew_lease", params, event, last=last)

    def reclaim(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        """The reaper's edge: only once the lease expired by the database's clock."""
        event = _Event.of_task(REAPER_TRANSITION, actor)
        return self._task("task_reclaim", _task_params(task_run_id, REAPER_TRANSITION), event)

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float, *, actor: str
    ) -> TaskRunRow | None:
        """FAILED to RETRYING with attempts left; due ``delay_seconds`` from now."""
        params = _task_params(task_run_id, _SCHEDULE_RETRY, {"delay_seconds": delay_seconds})
        return self._task("task_schedule_retry", params, _Event.of_task(_SCHEDULE_RETRY, actor))

    def retry_ready(self, task_run_id: UUID, *, actor: str) -> TaskRunRow | None:
        """RETRYING to READY once the retry is due by the database's clock."""
        event = _Event.of_task(_RETRY_READY, actor)
        return self._task("task_retry_ready", _task_params(task_run_id, _RETRY_READY), event)

    def _task(
        self, statement: str, params: dict[str, Any], event: _Event, *, last: bool = False
    ) -> TaskRunRow | None:
        name, values = self._statement(statement, params, event)
        rows = self._tx.run(name, values, commit=self._commits(last))
        return self._recorded(TaskRunRow, rows, event)

    def _commits(self, last: bool) -> bool:
        """Whether a transaction's last statement may carry its COMMIT: not when the
        event is built in Python, which is appended after the statement."""
        return last and self.events_in_sql

    def _statement(
        self, statement: str, params: dict[str, Any], event: _Event
    ) -> tuple[str, dict[str, Any]]:
        """The transition's statement: on PostgreSQL its variant that stores ``event``."""
        if not self.events_in_sql:
            return statement, params
        event_params = event.parameters(self._mapper.transcoder)
        return queries.recorded_name(statement), {**params, **event_params}

    def _recorded(
        self, row_type: type[_Recorded], rows: list[Row], event: _Event
    ) -> _Recorded | None:
        """The new row (``None``: lost), its event stored (SQLite: stored here)."""
        row = first_row(row_type, rows)
        if row is not None and not self.events_in_sql:
            self.append([event.built_from(row)])
        return row

    # --- workflow runs ---------------------------------------------------------------

    def lock_run(self, run_id: UUID) -> WorkflowRunRow | None:
        """The run row, locked until this transaction ends (one advance at a time)."""
        return first_row(WorkflowRunRow, self._tx.run("lock_workflow_run", {"id": run_id}))

    def try_lock_run(self, run_id: UUID) -> WorkflowRunRow | None:
        """Like :meth:`lock_run`, but ``None`` at once if another transaction holds the
        row (PostgreSQL; SQLite's write lock already excludes everyone else)."""
        return first_row(WorkflowRunRow, self._tx.run("try_lock_workflow_run", {"id": run_id}))

    def try_lock_run_state(self, run_id: UUID) -> WorkflowRunState | None:
        """The run's state, its row locked like :meth:`try_lock_run` (``None`` if another
        transaction holds it, or no such run), without reading its definition."""
        return _run_state(self._tx.run("try_lock_workflow_run_state", {"id": run_id}))

    def mark_run(self, run_id: UUID, task_key: str | None = None) -> None:
        """Record that the run needs advancing, because of a change to ``task_key`` (or
        to the run itself: ``None``); on PostgreSQL the commit NOTIFYs."""
        self._tx.defer("mark_run_wakeup", {"workflow_run_id": run_id, "task_key": task_key})
        self.marked_runs = True

    def clear_wakeups(self, run_id: UUID) -> list[str | None]:
        """Delete the run's marks that this statement sees; the task keys they named
        (``None`` for a mark of the run itself). A mark committed after this statement
        stays, so the change it announces is advanced next time."""
        rows = self._tx.run("delete_run_wakeups", {"workflow_run_id": run_id})
        return [row["task_key"] for row in rows]

    def move_run(self, run_id: UUID, edge: Transition, *, actor: str) -> WorkflowRunRow | None:
        """Any WorkflowRun edge; ``start`` sets started_at, a terminal one finished_at."""
        event = _Event.of_run(edge, actor)
        name, params = self._statement("run_move", _run_params(run_id, edge), event)
        return self._recorded(WorkflowRunRow, self._tx.run(name, params), event)

    def start_run(self, run_id: UUID, *, actor: str) -> tuple[WorkflowRunRow | None, bool]:
        """The ``start`` edge, and whether any task of the run has moved since its
        creation (asked after the start), in ONE round trip: the new row (``None``:
        the run was not pending) and that answer."""
        event = _Event.of_run(START_RUN, actor)
        moved = ("select_run_has_moved_tasks", {"workflow_run_id": run_id})
        run_rows, moved_rows = self._tx.run_each(
            [self._statement("run_move", _run_params(run_id, START_RUN), event), moved]
        )
        return self._recorded(WorkflowRunRow, run_rows, event), bool(moved_rows[0]["moved"])

    def succeed_run_when_complete(
        self, run_id: UUID, *, actor: str, closing: str | None = None
    ) -> tuple[RunCompletion, WorkflowRunRow | None]:
        """:meth:`run_completion`, and the run's ``succeed`` edge taken if every task
        succeeded (none unfinished, none cancelled), in ONE round trip: the completion
        and the new run row (``None``: not complete, or the run was not running).

        ``closing``: the key of the task whose finish this closes; then the run is also
        marked for it unless settled (``mark_run_wakeup_unless_settled``), and nothing
        follows: PostgreSQL sends the COMMIT in the same round trip."""
        event = _Event.of_run(SUCCEED_RUN, actor)
        params = {
            "id": run_id,
            "source": SUCCEED_RUN.source.value,
            "target": SUCCEED_RUN.target.value,
        }
        statements = [
            ("select_run_completion", {"workflow_run_id": run_id}),
            self._statement("run_succeed_when_complete", params, event),
        ]
        if closing is not None:
            mark = {
                "workflow_run_id": run_id,
                "task_key": closing,
                "succeeded": SUCCEED_RUN.target.value,
            }
            statements.append(("mark_run_wakeup_unless_settled", mark))
        rows = self._tx.run_each(statements, commit=self._commits(closing is not None))
        if closing is not None and rows[2]:
            self.marked_runs = True
        completion: RunCompletion = rows[0][0]["completion"]
        return completion, self._recorded(WorkflowRunRow, rows[1], event)

    def cancel_run(self, run_id: UUID, *, actor: str) -> WorkflowRunRow | None:
        """A user's cancel: pending or running to cancelled in ONE conditional write
        (``run_cancel``); the new row, its event naming the edge the row really took (so
        built in Python, from the state it left), or None if the run is already terminal
        (or unknown)."""
        params = {
            "id": run_id,
            "pending": WorkflowRunState.PENDING.value,
            "running": WorkflowRunState.RUNNING.value,
            "target": WorkflowRunState.CANCELLED.value,
        }
        rows = self._tx.run("run_cancel", params)
        if not rows:
            return None
        row = WorkflowRunRow.from_mapping(rows[0])
        edge = _CANCEL_RUN_FROM[WorkflowRunState(rows[0]["source"])]
        self.append([_Event.of_run(edge, actor).built_from(row)])
        return row

    # --- the outbox ------------------------------------------------------------------

    def enqueue_dispatch(
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

    def pending_dispatches(
        self, limit: int, task_types: Collection[str] | None = None
    ) -> list[OutboxRow]:
        """Up to ``limit`` unpublished rows (only of ``task_types``, if given), oldest
        first, locked for this transaction; on PostgreSQL a row another publisher holds
        is skipped."""
        if task_types is None:
            rows = self._tx.run("select_pending_outbox", {"limit": limit})
        else:
            params = {"limit": limit, "task_types": sorted(task_types)}
            rows = self._tx.run("select_pending_outbox_of_types", params)
        return [OutboxRow.from_mapping(r) for r in rows]

    def mark_published(self, dispatch_ids: Collection[UUID]) -> None:
        """Mark a sweep's delivered dispatches published, all in one statement."""
        if dispatch_ids:
            self._tx.defer("mark_outbox_published", {"dispatch_ids": id_list(dispatch_ids)})

    def stalled_ready(self, older_than_seconds: float, limit: int) -> list[TaskRunRow]:
        """Tasks READY for over ``older_than_seconds`` with no dispatch pending or
        published within that time."""
        params = {"older_than": older_than_seconds, "limit": limit}
        return [TaskRunRow.from_mapping(r) for r in self._tx.run("select_stalled_ready", params)]


#: ``projector.TRANSACTION_NOW`` as a JSON string: what SQL replaces with now().
_QUOTED_TRANSACTION_NOW = f'"{projector.TRANSACTION_NOW.isoformat()}"'.encode()


@cache
def _transaction_now_stamp(transcoder: Transcoder) -> bytes:
    """How ``transcoder`` writes ``projector.TRANSACTION_NOW``: encoded once per event
    log, not once per creation event."""
    return transcoder.encode(projector.TRANSACTION_NOW)


def _around_transaction_now(state: bytes, stamp: bytes) -> tuple[bytes, bytes]:
    """A stored state cut around the time in its one ``stamp`` (``TRANSACTION_NOW`` as
    the log's transcoder writes a datetime: ``{"_type_":"datetime_iso","_data_":
    "0001-..."}``). User JSON cannot forge the stamp: it holds no datetimes, and the
    transcoder escapes an object with those two keys; a user's string of that time
    can (it is the bare quoted time), which is why the whole stamp is looked for."""
    head, found, tail = state.partition(stamp)
    if not found or stamp in tail:
        raise ValueError("an event stamped TRANSACTION_NOW must carry the stamp exactly once")
    before, time, after = stamp.partition(_QUOTED_TRANSACTION_NOW)
    if not time:
        raise ValueError(f"the transcoder wrote TRANSACTION_NOW as {stamp!r}: no time in it")
    return head + before, after + tail


#: Which of a leaf's success statements (``Writes._leaf_success_statements``) have rows
#: the caller reads: the finish's (the new task row) and the mark's (whether it marked).
_LEAF_ROWS_READ = frozenset({1, 4})


@dataclass(frozen=True, slots=True)
class Leaf:
    """A claimed task no other task of its run depends on: its success can settle the
    run in the finish's own round trip (:meth:`Writes.succeed_leaf`)."""

    run_id: UUID
    task_key: str


@dataclass(frozen=True, slots=True)
class LeafSuccess:
    """A handler's success of a :class:`Leaf` under its claim's fencing token."""

    task_run_id: UUID
    fencing_token: int
    leaf: Leaf
    result: Any = None


@dataclass(frozen=True, slots=True)
class _Event:
    """The event a transition records: its class (which names its aggregate's
    declaration), the state it left, and who; ``written``: the user JSON the statement
    itself writes (a finish's result and error)."""

    declaration: Declaration
    event_class: type[TransitionedEvent]
    source: str
    actor: str
    written: Mapping[str, Any] | None = None

    @classmethod
    def of_task(
        cls, edge: Transition, actor: str, written: Mapping[str, Any] | None = None
    ) -> _Event:
        event_class = task_run.EVENT_FOR_TRANSITION[edge.name]
        return cls(task_run.DECLARATION, event_class, edge.source.value, actor, written)

    @classmethod
    def of_run(cls, edge: Transition, actor: str) -> _Event:
        event_class = workflow_run.EVENT_FOR_TRANSITION[edge.name]
        return cls(workflow_run.DECLARATION, event_class, edge.source.value, actor)

    def parameters(self, transcoder: Transcoder) -> dict[str, Any]:
        """What the statement that stores it in SQL takes (``event_sql``): the user JSON
        it writes escaped by the event log's own transcoder, so it reads back as it was."""
        params: dict[str, Any] = {
            "event_topic": _topic(self.event_class),
            "event_source": self.source,
            "event_actor": self.actor,
        }
        for field in event_sql.json_fields(self.declaration):
            escaped = None
            if self.written is not None and field in self.written:
                escaped = transcoder.encode(self.written[field]).decode()
            params[event_sql.escaped_parameter(field)] = escaped
        return params

    def built_from(self, row: TaskRunRow | WorkflowRunRow) -> TransitionedEvent:
        """The same event built in Python, from the row the statement returned."""
        return event_from_row(
            self.declaration, self.event_class, row.values(), source=self.source, actor=self.actor
        )


@cache
def _topic(event_class: type[TransitionedEvent]) -> str:
    return get_topic(event_class)


def _task_params(
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


def _run_params(run_id: UUID, edge: Transition) -> dict[str, Any]:
    """A run edge's parameters: ``start`` sets started_at, a terminal one finished_at."""
    return {
        "id": run_id,
        "source": edge.source.value,
        "target": edge.target.value,
        "starts": edge.name == START_RUN.name,
        "terminal": WORKFLOW_RUN_MACHINE.is_terminal(edge.target),
    }


def _finish_params(
    task_run_id: UUID,
    edge: Transition,
    fencing_token: int,
    result: Any,
    error: Mapping[str, str] | None,
) -> dict[str, Any]:
    if edge.name not in _FINISH_EDGES:
        raise ValueError(f"finish takes {sorted(_FINISH_EDGES)}, not {edge.name!r}")
    own = {"fencing_token": fencing_token, "result": result, "error": error}
    return _task_params(task_run_id, edge, own)


def _run_state(rows: list[Row]) -> WorkflowRunState | None:
    """The state a run-locking query returned; ``None`` for no row (held, or no run)."""
    return WorkflowRunState(rows[0]["state"]) if rows else None
