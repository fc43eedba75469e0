"""A workflow run's writes: creation, its edges, and the locks of an advance.

Each edge is ONE conditional write on the run's row with its event (``recording.py``),
and the run's mark for a scheduler in the same transaction (``marks.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.aggregates.ids import new_id
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE, Transition
from flowforge.aggregates.run_plan import RunPlan
from flowforge.aggregates.states import WorkflowRunState
from flowforge.projections import projector
from flowforge.projections.reads import RunCompletion, first_row
from flowforge.projections.tables import WorkflowRunRow
from flowforge.projections.writes.concurrency_limits import LimitWrites
from flowforge.projections.writes.edges import START_RUN, SUCCEED_RUN
from flowforge.projections.writes.marks import RunMarks
from flowforge.projections.writes.recording import EventRecipe, Recording, Statement
from flowforge.projections.writes.tasks import TaskWrites, run_state_of

#: A user's cancel takes one of two edges, decided by the row's state when it is written.
_CANCEL_RUN_FROM: Mapping[WorkflowRunState, Transition] = {
    WorkflowRunState.PENDING: WORKFLOW_RUN_MACHINE.get("cancel_before_start"),
    WorkflowRunState.RUNNING: WORKFLOW_RUN_MACHINE.get("cancel"),
}
if {e.target for e in _CANCEL_RUN_FROM.values()} != {WorkflowRunState.CANCELLED}:
    raise ValueError("a user's cancel must end in cancelled")


class RunWrites:
    """The workflow-run writes of one write transaction."""

    def __init__(
        self,
        recording: Recording,
        marks: RunMarks,
        tasks: TaskWrites,
        limits: LimitWrites,
        *,
        now: Callable[[], datetime],
    ) -> None:
        self._recording = recording
        self._limits = limits
        #: The database's clock (``Reads.now``), asked only where SQL does not build events.
        self._now = now
        self._tx = recording.tx
        self._marks = marks
        self._tasks = tasks

    def create(self, plan: RunPlan) -> tuple[UUID, bool]:
        """Write ``plan``: the run and its task runs (and a rerun's carried-over
        results), as the plan's events say (``flowforge.aggregates.run_plan`` decides
        them all); ``(id, False)`` and nothing written if a run already has the plan's
        idempotency key. A delayed run is marked, so that a scheduler sets its timer."""
        # A carry-over event holds its time twice (its own and finished_at), which the
        # stand-in for the transaction's clock cannot (projector.TRANSACTION_NOW holds
        # it once): a rerun asks the clock first, one round trip, as SQLite always does.
        # So does a start time, which is compared with (or counted from) that clock.
        asks_clock = plan.rerun_of is not None or plan.start_at is not None
        at = self._now() if asks_clock else self._recording.creation_time(self._now)
        created = plan.run_created(new_id(), at)
        if not projector.apply_event(self._tx, created):
            assert plan.idempotency_key is not None  # only a key can conflict
            return self.id_by_idempotency_key(plan.idempotency_key), False
        self._recording.append([created])
        # Before any task row is written: it may take task_runs' lock (concurrency_limits.py).
        self._limits.ensure_counters(plan.limited_task_types)
        for creation, carry_over in plan.task_events(created):
            self._tasks.create(creation)
            if carry_over is not None:
                self._tasks.carry_over(carry_over)
        run_id = created.originator_id
        if created.start_at is not None:
            # Wakes the schedulers, whose advance of it finds it waiting and sets their
            # timer to its start time: on time even when it comes before their next pass.
            self._marks.mark(run_id)
        return run_id, True

    def lock(self, run_id: UUID) -> WorkflowRunRow | None:
        """The run row, locked until this transaction ends (one advance at a time)."""
        return first_row(WorkflowRunRow, self._tx.run("lock_workflow_run", {"id": run_id}))

    def try_lock(self, run_id: UUID) -> WorkflowRunRow | None:
        """Like :meth:`lock`, but ``None`` at once if another transaction holds the row
        (PostgreSQL; SQLite's write lock already excludes everyone else)."""
        return first_row(WorkflowRunRow, self._tx.run("try_lock_workflow_run", {"id": run_id}))

    def try_lock_state(self, run_id: UUID) -> WorkflowRunState | None:
        """The run's state, its row locked like :meth:`try_lock` (``None`` if another
        transaction holds it, or no such run), without reading its definition."""
        return run_state_of(self._tx.run("try_lock_workflow_run_state", {"id": run_id}))

    def move(self, run_id: UUID, edge: Transition, *, actor: str) -> WorkflowRunRow | None:
        """Any WorkflowRun edge; ``start`` sets started_at, a terminal one finished_at."""
        event = EventRecipe.of_run(edge, actor)
        name, params = self._recording.statement("run_move", run_params(run_id, edge), event)
        return self._followed(
            self._recording.recorded(WorkflowRunRow, self._tx.run(name, params), event)
        )

    def start(self, run_id: UUID, *, actor: str) -> tuple[WorkflowRunRow | None, bool]:
        """The ``start`` edge, and whether any task of the run has moved since its
        creation (asked after the start), in ONE round trip: the new row (``None``:
        the run was not pending) and that answer."""
        event = EventRecipe.of_run(START_RUN, actor)
        moved = ("select_run_has_moved_tasks", {"workflow_run_id": run_id})
        start = self._recording.statement("run_move", run_params(run_id, START_RUN), event)
        run_rows, moved_rows = self._tx.run_each([start, moved])
        row = self._recording.recorded(WorkflowRunRow, run_rows, event)
        return self._followed(row), bool(moved_rows[0]["moved"])

    def succeed_when_complete(
        self, run_id: UUID, *, actor: str, finished_task_key: str | None = None
    ) -> tuple[RunCompletion, WorkflowRunRow | None]:
        """The run's completion, and its ``succeed`` edge taken if every task succeeded
        (none unfinished, none cancelled), in ONE round trip: the completion and the new
        run row (``None``: not complete, or the run was not running).

        ``finished_task_key``: the task whose finish this transaction writes; the run is
        then also marked for it unless settled (``mark_run_wakeup_unless_settled``), and
        this is the transaction's last statement: PostgreSQL sends the COMMIT with it."""
        event = EventRecipe.of_run(SUCCEED_RUN, actor)
        params = {
            "id": run_id,
            "source": SUCCEED_RUN.source.value,
            "target": SUCCEED_RUN.target.value,
        }
        statements: list[Statement] = [
            ("select_run_completion", {"workflow_run_id": run_id}),
            self._recording.statement("run_succeed_when_complete", params, event),
        ]
        last = finished_task_key is not None
        if last:
            mark = {
                "workflow_run_id": run_id,
                "task_key": finished_task_key,
                "succeeded": SUCCEED_RUN.target.value,
            }
            statements.append(("mark_run_wakeup_unless_settled", mark))
        rows = self._tx.run_each(statements, commit=self._recording.commits(last))
        self._recording.last_statement_sent = last
        if last and rows[2]:
            self._marks.made = True
        completion: RunCompletion = rows[0][0]["completion"]
        row = self._recording.recorded(WorkflowRunRow, rows[1], event)
        return completion, self._followed(row)

    def cancel(self, run_id: UUID, *, actor: str) -> WorkflowRunRow | None:
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
        self._recording.append([EventRecipe.of_run(edge, actor).built_from(row)])
        return self._followed(row)

    def id_by_idempotency_key(self, idempotency_key: str) -> UUID:
        """The id of the run that has this idempotency key."""
        (row,) = self._tx.run(
            "select_run_by_idempotency_key", {"idempotency_key": idempotency_key}
        )
        run_id: UUID = row["id"]
        return run_id

    def _followed(self, row: WorkflowRunRow | None) -> WorkflowRunRow | None:
        """What follows a won run edge besides its event: its mark."""
        if row is not None:
            self._marks.after_edge(row.id)
        return row


def run_params(run_id: UUID, edge: Transition) -> dict[str, Any]:
    """A run edge's parameters: ``start`` sets started_at, a terminal one finished_at."""
    return {
        "id": run_id,
        "source": edge.source.value,
        "target": edge.target.value,
        "starts": edge.name == START_RUN.name,
        "terminal": WORKFLOW_RUN_MACHINE.is_terminal(edge.target),
    }
