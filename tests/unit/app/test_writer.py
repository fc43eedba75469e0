"""The one rule's steps over a store transaction (pure: the store is a stand-in that
returns the row a conditional write would have returned). The event of each write is the
store's (tests/unit/projections/test_task_events.py); the writer adds the run's mark and
the outbox row."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID, uuid4

import pytest

from flowforge.aggregates.machines import TASK_RUN_MACHINE
from flowforge.app.writer import Writer
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
        state=state,
        fencing_token=token,
        attempt=1,
        lease_owner="w1" if running else None,
        lease_expires_at=AT if running else None,
        started_at=AT,
        finished_at=None,
        retry_due_at=None,
        result=None,
        error=None,
        version=version,
        created_at=AT,
        updated_at=AT,
    )


class FakeWrites:
    """Answers every conditional write with ``row``; records the marks and dispatches
    the writer adds, and whether it asked for a last statement."""

    def __init__(self, row: TaskRunRow | None) -> None:
        self.row = row
        self.marked: list[UUID] = []
        self.dispatched: list[tuple[UUID, int]] = []
        self.last: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        def write(*args: Any, last: bool = False, **kwargs: Any) -> TaskRunRow | None:
            self.last.append(last)
            return self.row

        return write

    def mark_run(self, run_id: UUID, task_key: str | None = None) -> None:
        self.marked.append(run_id)

    def enqueue_dispatch(self, task_run_id: UUID, *_: Any, **__: Any) -> UUID:
        assert self.row is not None
        self.dispatched.append((task_run_id, self.row.fencing_token))
        return uuid4()


def writer_over(row: TaskRunRow | None) -> tuple[Writer, FakeWrites]:
    fake = FakeWrites(row)
    return Writer(cast(Writes, fake)), fake


def test_a_lost_write_marks_and_dispatches_nothing_and_returns_none() -> None:
    writer, fake = writer_over(None)
    assert writer.reclaim(uuid4(), actor="reaper") is None
    assert fake.marked == [] and fake.dispatched == []


def test_a_won_claim_leaves_its_run_alone_and_can_be_the_last_statement() -> None:
    row = task_row("running", version=2, token=1)
    writer, fake = writer_over(row)
    assert writer.claim(row.id, "w1", 30.0, last=True) == row
    assert fake.last == [True]
    assert fake.marked == [] and fake.dispatched == []  # running is not dispatchable


def test_a_finish_marks_its_run() -> None:
    row = task_row("failed", version=3)
    writer, fake = writer_over(row)
    writer.finish(TASK_RUN_MACHINE.get("fail"), row.id, 1, actor="w1")
    assert fake.marked == [row.workflow_run_id] and fake.dispatched == []


@pytest.mark.parametrize("edge", ["reap_lease", "retry_ready", "dependencies_satisfied"])
def test_a_task_that_becomes_ready_gets_exactly_one_dispatch(edge: str) -> None:
    row = task_row("ready", version=3, token=2)
    writer, fake = writer_over(row)
    transition = TASK_RUN_MACHINE.get(edge)
    if edge == "reap_lease":
        writer.reclaim(row.id, actor="reaper")
    elif edge == "retry_ready":
        writer.retry_ready(row.id, actor="scheduler")
    else:
        writer.move_task(transition, row.id, actor="scheduler")
    assert fake.dispatched == [(row.id, 2)]
    assert fake.marked == [row.workflow_run_id]


def test_a_heartbeat_marks_and_dispatches_nothing() -> None:
    row = task_row("running", version=4)
    writer, fake = writer_over(row)
    assert writer.renew_lease(row.id, 1, 30.0, actor="w1", last=True) == row
    assert fake.last == [True]
    assert fake.marked == [] and fake.dispatched == []


def test_take_task_edge_refuses_an_edge_that_needs_a_lease_or_a_worker() -> None:
    writer, _ = writer_over(None)
    with pytest.raises(ValueError, match="'claim'"):
        writer.take_task_edge(TASK_RUN_MACHINE.get("claim"), uuid4(), actor="user")
