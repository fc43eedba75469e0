"""What follows a task's edge in its transaction (pure: the transaction is a stand-in
that answers every conditional write with the row it would have returned). The event of
each write is tested in tests/unit/projections/test_task_events.py; here, the run's mark
and the outbox row that ``TaskWrites`` adds, and whether it asked for a last statement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast
from uuid import uuid4

import pytest
from eventsourcing.persistence import Mapper

from flowforge.aggregates.machines import TASK_RUN_MACHINE
from flowforge.projections.db.protocols import Row, Transaction
from flowforge.projections.tables import TaskRunRow
from flowforge.projections.writes import Writes

AT = datetime(2026, 1, 1, tzinfo=UTC)


def task_row(state: str, *, version: int = 2, token: int = 1) -> TaskRunRow:
    running = state == "running"
    return TaskRunRow(
        id=uuid4(),
        workflow_run_id=uuid4(),
        task_key="extract",
        task_type="extract_rows",
        depends_on=[],
        max_attempts=3,
        lease_seconds=30.0,
        timeout_seconds=None,
        max_running=None,
        max_worker_losses=None,
        map_index=None,
        map_item=None,
        state=state,
        fencing_token=token,
        attempt=1,
        lease_owner="w1" if running else None,
        lease_expires_at=AT if running else None,
        deadline_at=None,
        started_at=AT,
        finished_at=None,
        retry_due_at=None,
        result=None,
        error=None,
        carried_from_run_id=None,
        carried_from_task_run_id=None,
        carried_from_attempt=None,
        worker_losses=0,
        version=version,
        created_at=AT,
        updated_at=AT,
    )


class StandInTransaction:
    """Answers every statement with ``row`` (none if ``None``); records the statements
    deferred (marks, outbox rows) and the ``commit`` of each run."""

    def __init__(self, row: TaskRunRow | None) -> None:
        self.rows: list[Row] = [] if row is None else [row.values()]
        self.deferred: list[tuple[str, Mapping[str, Any] | None]] = []
        self.commits: list[bool] = []

    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[Row]:
        self.commits.append(commit)
        return self.rows

    def run_each(
        self, statements: Sequence[tuple[str, Any]], *, commit: bool = False, unread: Any = ()
    ) -> list[list[Row]]:
        self.commits.append(commit)
        # The first statement is the task's; what follows it (a run's start) matched nothing.
        return [self.rows, *([] for _ in statements[1:])]

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        self.deferred.append((name, params))

    def named(self, name: str) -> list[Mapping[str, Any] | None]:
        return [params for deferred, params in self.deferred if deferred == name]


def writes_over(row: TaskRunRow | None) -> tuple[Writes, StandInTransaction]:
    tx = StandInTransaction(row)
    # events_in_sql: the statement stores the event itself, so nothing is appended here
    # and the stand-in's deferred statements are the marks and the outbox rows alone.
    mapper = cast(Mapper[Any], object())
    writes = Writes(cast(Transaction, tx), mapper, events_in_sql=True)
    writes.recording.statement = lambda name, params, event: (name, params)  # type: ignore[method-assign]
    return writes, tx


def test_a_lost_write_marks_and_dispatches_nothing_and_returns_none() -> None:
    writes, tx = writes_over(None)
    assert writes.tasks.reclaim(uuid4(), actor="reaper") is None
    assert (
        tx.named("mark_run_wakeup") == [] and not writes.marks.made and not writes.outbox.enqueued
    )


def test_a_won_claim_leaves_its_run_alone_and_can_be_the_last_statement() -> None:
    row = task_row("running", version=2, token=1)
    writes, tx = writes_over(row)
    assert writes.tasks.claim(row.id, "w1", 30.0, last=True) == row
    assert tx.commits == [True]
    assert tx.deferred == []  # running is not dispatchable, and a claim does not mark


def test_a_finish_marks_its_run() -> None:
    row = task_row("failed", version=3)
    writes, tx = writes_over(row)
    writes.tasks.finish(row.id, TASK_RUN_MACHINE.get("fail"), 1, actor="w1")
    assert tx.named("mark_run_wakeup") == [
        {"workflow_run_id": row.workflow_run_id, "task_key": "extract"}
    ]
    assert tx.named("insert_outbox") == [] and writes.marks.made


def test_an_edge_leaves_the_mark_to_its_caller_when_marks_are_off() -> None:
    row = task_row("failed", version=3)
    writes, tx = writes_over(row)
    writes.marks.after_edges = False
    writes.tasks.finish(row.id, TASK_RUN_MACHINE.get("fail"), 1, actor="w1")
    assert tx.named("mark_run_wakeup") == [] and not writes.marks.made


@pytest.mark.parametrize("edge", ["reap_lease", "retry_ready", "dependencies_satisfied"])
def test_a_task_that_becomes_ready_gets_exactly_one_dispatch(edge: str) -> None:
    row = task_row("ready", version=3, token=2)
    writes, tx = writes_over(row)
    if edge == "reap_lease":
        writes.tasks.reclaim(row.id, actor="reaper")
    elif edge == "retry_ready":
        writes.tasks.retry_ready(row.id, actor="scheduler")
    else:
        writes.tasks.move(row.id, TASK_RUN_MACHINE.get(edge), actor="scheduler")
    (dispatch,) = tx.named("insert_outbox")
    assert dispatch is not None
    assert (dispatch["task_run_id"], dispatch["fencing_token"]) == (row.id, 2)
    assert len(tx.named("mark_run_wakeup")) == 1 and writes.outbox.enqueued


def test_a_heartbeat_marks_and_dispatches_nothing() -> None:
    row = task_row("running", version=4)
    writes, tx = writes_over(row)
    assert writes.tasks.renew_lease(row.id, 1, 30.0, actor="w1", last=True) == row
    assert tx.commits == [True]
    assert tx.deferred == []


def test_take_edge_refuses_an_edge_that_needs_a_lease_or_a_worker() -> None:
    writes, _ = writes_over(None)
    with pytest.raises(ValueError, match="'claim'"):
        writes.tasks.take_edge(TASK_RUN_MACHINE.get("claim"), uuid4(), actor="user")
