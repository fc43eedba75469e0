"""The leaf shortcut: a success of a task no other task depends on, and everything that
can follow it, in ONE round trip with the COMMIT (PostgreSQL with its events in SQL).

The run row tried, the finish, then the run started if its claim could not, the run
succeeded if every task has, and the run's mark for a scheduler unless settled; the three
after the finish act only if it won and the run row is held here
(``run_start_after_finish`` in postgres.sql says how). The same outcome as a finish
followed by ``advance.advance_after_finish``, which take two round trips or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from flowforge.aggregates.states import WorkflowRunState
from flowforge.projections.reads import id_list
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes.concurrency_limits import free_statements
from flowforge.projections.writes.edges import START_RUN, SUCCEED_RUN, SUCCEED_TASK
from flowforge.projections.writes.marks import RunMarks
from flowforge.projections.writes.outbox import OutboxWrites
from flowforge.projections.writes.recording import EventRecipe, Recording, Statement
from flowforge.projections.writes.runs import run_params
from flowforge.projections.writes.tasks import finish_params

#: Which of a leaf's success statements (:func:`_statements`) have rows the caller
#: reads: the finish's (the new task row) and the mark's (whether it marked).
_ROWS_READ = frozenset({1, 4})


@dataclass(frozen=True, slots=True)
class Leaf:
    """A claimed task no other task of its run depends on: its success can settle the
    run in the finish's own round trip."""

    run_id: UUID
    task_key: str
    #: Its type, whose slot its success frees (docs/scheduling/limits.md).
    task_type: str


@dataclass(frozen=True, slots=True)
class LeafSuccess:
    """A handler's success of a :class:`Leaf` under its claim's fencing token."""

    task_run_id: UUID
    fencing_token: int
    leaf: Leaf
    result: Any = None


class LeafWrites:
    """The leaf shortcut in one write transaction: it ends the transaction."""

    def __init__(self, recording: Recording, marks: RunMarks, outbox: OutboxWrites) -> None:
        self._recording = recording
        self._marks = marks
        self._outbox = outbox

    def succeed(self, successes: Sequence[LeafSuccess], *, actor: str) -> list[TaskRunRow | None]:
        """Each success and all that follows it, all in ONE round trip with the COMMIT:
        one task's or a worker's batch. Each success is guarded on its own, and each
        statement sees the ones before it, so two leaves of one run in one batch settle
        the run once (the first holds the run row; the last finds every task done). Task
        rows are written in the order of their ids, as claims take them. Each new task
        row in the order given, or ``None``: lost, nothing written for it."""
        if not self._recording.events_in_sql:
            raise TypeError("the leaf shortcut needs a store that builds its events in SQL")
        if not successes:
            return []
        statements: list[Statement] = []
        finishes: list[EventRecipe] = []
        in_lock_order = sorted(successes, key=lambda success: success.task_run_id)
        for success in in_lock_order:
            written = {"result": success.result, "error": None}
            finish = EventRecipe.of_task(SUCCEED_TASK, actor, written)
            finishes.append(finish)
            statements += self._statements(success, finish, actor)
        per = len(statements) // len(successes)
        # Only the finish's and the mark's rows are read: not the run rows the start and
        # the success return (their definitions are most of the loading).
        unread = [i for i in range(len(statements)) if i % per not in _ROWS_READ]
        frees = _frees(in_lock_order)
        lock = _lock_in_id_order(in_lock_order)
        first_free = len(statements)
        rows = self._recording.tx.run_each(
            [*lock, *statements, *frees],
            commit=True,
            unread=[*range(len(lock)), *(len(lock) + i for i in unread)],
        )[len(lock) :]
        self._recording.last_statement_sent = True
        if any(rows[first_free:]):  # a release's rows: a held task dispatched again
            self._outbox.enqueued = True
        rows = rows[:first_free]
        groups = [rows[i : i + per] for i in range(0, len(rows), per)]
        if any(group[-1] for group in groups):  # the mark's rows: a scheduler's to do
            self._marks.made = True
        finished = {
            success.task_run_id: self._recording.recorded(TaskRunRow, group[1], finish)
            for success, group, finish in zip(in_lock_order, groups, finishes, strict=True)
        }
        start, succeed = (
            EventRecipe.of_run(START_RUN, actor),
            EventRecipe.of_run(SUCCEED_RUN, actor),
        )
        for group in groups:  # the runs' start and success: counted (not read)
            self._recording.recorded(WorkflowRunRow, group[2], start)
            self._recording.recorded(WorkflowRunRow, group[3], succeed)
        return [finished[success.task_run_id] for success in successes]

    def _statements(
        self, success: LeafSuccess, finish: EventRecipe, actor: str
    ) -> list[Statement]:
        """One leaf's success: the run row tried, the finish, then the run's start,
        success and mark, each guarded by the finish having won here (postgres.sql)."""
        task_run_id, leaf = success.task_run_id, success.leaf
        start = EventRecipe.of_run(START_RUN, actor)
        succeed = EventRecipe.of_run(SUCCEED_RUN, actor)
        guard = {"task_run_id": task_run_id}
        mark = {
            **guard,
            "id": leaf.run_id,
            "task_key": leaf.task_key,
            "succeeded": SUCCEED_RUN.target.value,
            "running": WorkflowRunState.RUNNING.value,
        }
        finish_values = finish_params(
            task_run_id, SUCCEED_TASK, success.fencing_token, success.result, None
        )
        record = self._recording.statement
        # Keep _ROWS_READ in step with this order.
        return [
            ("try_lock_workflow_run_of_task", {"id": task_run_id}),
            record("task_finish", finish_values, finish),
            record(
                "run_start_after_finish", {**run_params(leaf.run_id, START_RUN), **guard}, start
            ),
            record(
                "run_succeed_after_finish",
                {**run_params(leaf.run_id, SUCCEED_RUN), **guard},
                succeed,
            ),
            ("mark_run_wakeup_after_finish", mark),
        ]


def _lock_in_id_order(successes: Sequence[LeafSuccess]) -> list[Statement]:
    """A batch's task rows, locked in id order before its first finish, which may free
    a concurrency limit's slot (a counter row): every writer takes task rows before
    counter rows (docs/scheduling/limits.md, "Deadlocks"). One success needs none."""
    if len(successes) < 2:
        return []
    ids = id_list([success.task_run_id for success in successes])
    return [("lock_task_runs_in_id_order", {"task_run_ids": ids})]


def _frees(successes: Sequence[LeafSuccess]) -> list[Statement]:
    """After every finish, the held tasks the successes' freed slots dispatch again
    (concurrency_limits.py). Each finish freed its slots in its own statement (task_finish's
    recorded variant, postgres.sql); each release acts only for a success that won, and
    finds nothing for a task with no limit."""
    return [free_statements(s.task_run_id, s.leaf.task_type, s.leaf.run_id)[-1] for s in successes]
