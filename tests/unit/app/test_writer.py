"""The one rule's steps over a store transaction (pure: the store is a stand-in that
returns the row a conditional write would have returned)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID, uuid4

import pytest

from flowforge.aggregates.machines import TASK_RUN_MACHINE
from flowforge.aggregates.task_run import TaskRun
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
    """Answers every conditional write with ``row``; records what the writer appends."""

    def __init__(self, row: TaskRunRow | None) -> None:
        self.row = row
        self.appended: list[Any] = []
        self.dispatched: list[tuple[UUID, int]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.row

    def append(self, events: list[Any]) -> None:
        self.appended += events

    def enqueue_dispatch(self, task_run_id: UUID, *_: Any, **__: Any) -> UUID:
        assert self.row is not None
        self.dispatched.append((task_run_id, self.row.fencing_token))
        return uuid4()


def writer_over(row: TaskRunRow | None) -> tuple[Writer, FakeWrites]:
    fake = FakeWrites(row)
    return Writer(cast(Writes, fake)), fake


def test_a_lost_write_appends_nothing_and_returns_none() -> None:
    writer, fake = writer_over(None)
    assert writer.claim(uuid4(), "w1", 30.0) is None
    assert fake.appended == [] and fake.dispatched == []


def test_a_won_claim_appends_its_event_built_from_the_row() -> None:
    row = task_row("running", version=2, token=1)
    writer, fake = writer_over(row)
    assert writer.claim(row.id, "w1", 30.0) == row
    (event,) = fake.appended
    assert isinstance(event, TaskRun.Claimed)
    assert (event.originator_id, event.originator_version) == (row.id, 2)
    assert (event.source, event.state, event.actor, event.timestamp) == (
        "ready",
        "running",
        "w1",
        AT,
    )
    assert fake.dispatched == []  # running is not dispatchable


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
    assert len(fake.appended) == 1


def test_a_heartbeat_is_a_lease_renewed_event_with_no_dispatch() -> None:
    row = task_row("running", version=4)
    writer, fake = writer_over(row)
    assert writer.renew_lease(row.id, 1, 30.0, actor="w1") == row
    (event,) = fake.appended
    assert isinstance(event, TaskRun.LeaseRenewed) and event.source == "running"
    assert fake.dispatched == []


def test_take_task_edge_refuses_an_edge_that_needs_a_lease_or_a_worker() -> None:
    writer, _ = writer_over(None)
    with pytest.raises(ValueError, match="'claim'"):
        writer.take_task_edge(TASK_RUN_MACHINE.get("claim"), uuid4(), actor="user")
