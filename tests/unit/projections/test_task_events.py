"""Each task transition records its event through the store (pure: a stand-in
transaction that answers with the row a conditional write returned, and the real mapper).

On SQLite (``events_in_sql=False``) the store builds the event in Python from that row
and appends it in the same transaction; on PostgreSQL it runs the statement's
``*_recorded`` variant, which stores the event itself (tests/integration/projections/
test_event_sql.py proves the two events read back equal), and appends nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    Mapper,
    StoredEvent,
    UUIDAsHex,
)

from flowforge.aggregates.machines import TASK_RUN_MACHINE
from flowforge.aggregates.task_run import TaskRun
from flowforge.projections import event_log
from flowforge.projections.writes import Writes

AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(state: str, **changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": uuid4(),
        "workflow_run_id": uuid4(),
        "task_key": "extract",
        "task_type": "extract_rows",
        "depends_on": [],
        "max_attempts": 3,
        "lease_seconds": 30.0,
        "timeout_seconds": None,
        "max_running": None,
        "max_worker_losses": None,
        "map_index": None,
        "map_item": None,
        "state": state,
        "fencing_token": 1,
        "attempt": 1,
        "lease_owner": "w1",
        "lease_expires_at": AT,
        "deadline_at": None,
        "started_at": AT,
        "finished_at": None,
        "retry_due_at": None,
        "result": None,
        "error": None,
        "carried_from_run_id": None,
        "carried_from_task_run_id": None,
        "carried_from_attempt": None,
        "worker_losses": 0,
        "version": 2,
        "created_at": AT,
        "updated_at": AT,
    }
    return {**values, **changes}


class FakeTransaction:
    """Answers every statement whose name starts with ``task_`` with ``row``."""

    def __init__(self, answer: Mapping[str, Any] | None) -> None:
        self.answer = answer
        self.ran: list[tuple[str, dict[str, Any], bool]] = []
        self.deferred: list[tuple[str, dict[str, Any]]] = []

    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[dict[str, Any]]:
        self.ran.append((name, dict(params or {}), commit))
        return [dict(self.answer)] if self.answer and name.startswith("task_") else []

    def run_each(
        self,
        statements: Sequence[tuple[str, Mapping[str, Any] | None]],
        *,
        commit: bool = False,
        unread: Collection[int] = (),
    ) -> list[list[dict[str, Any]]]:
        return [self.run(name, params, commit=commit) for name, params in statements]

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        self.deferred.append((name, dict(params or {})))

    def defer_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        for each in params:
            self.defer(name, each)

    def run_script(self, name: str) -> None:
        raise AssertionError(name)


def mapper() -> Mapper[UUID]:
    transcoder = event_log.UserSafeJSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return Mapper(transcoder=transcoder)


def writes(answer: Mapping[str, Any] | None, *, in_sql: bool) -> tuple[Writes, FakeTransaction]:
    tx = FakeTransaction(answer)
    return Writes(tx, mapper(), events_in_sql=in_sql), tx


def appended_events(tx: FakeTransaction) -> list[Any]:
    stored = [
        StoredEvent(p["originator_id"], p["originator_version"], p["topic"], p["state"])
        for name, p in tx.deferred
        if name == "insert_stored_event"
    ]
    return [mapper().to_domain_event(event) for event in stored]


def test_on_sqlite_a_claim_appends_its_event_built_from_the_returned_row() -> None:
    claimed = row("running", version=2, fencing_token=1, lease_owner="w1")
    store, tx = writes(claimed, in_sql=False)

    assert store.tasks.claim(claimed["id"], "w1", 30.0, last=True) is not None

    [(name, _, commit), (start, _, _)] = tx.ran
    assert (name, commit) == ("task_claim", False)  # SQLite commits at the end anyway
    assert start == "run_start_after_claim"  # no run row here: no start, no event
    (event,) = appended_events(tx)
    assert isinstance(event, TaskRun.Claimed)
    assert (event.originator_id, event.originator_version) == (claimed["id"], 2)
    assert (event.source, event.state, event.actor, event.timestamp) == (
        "ready",
        "running",
        "w1",
        AT,
    )


def test_on_postgres_a_claim_runs_its_recorded_statement_and_commits_with_it() -> None:
    claimed = row("running")
    store, tx = writes(claimed, in_sql=True)

    store.tasks.claim(claimed["id"], "w1", 30.0, last=True)

    [(name, params, commit), (start, start_params, _)] = tx.ran
    assert (name, commit) == ("task_claim_recorded", True)
    assert params["event_topic"] == "flowforge.aggregates.task_run:TaskRun.Claimed"
    assert start == "run_start_after_claim_recorded"
    assert start_params["event_topic"] == "flowforge.aggregates.workflow_run:WorkflowRun.Started"
    assert (params["event_source"], params["event_actor"]) == ("ready", "w1")
    assert tx.deferred == []  # the statement stored the event


@pytest.mark.parametrize("in_sql", [False, True])
def test_a_heartbeat_records_a_lease_renewed_event_from_running(in_sql: bool) -> None:
    renewed = row("running", version=4)
    store, tx = writes(renewed, in_sql=in_sql)

    store.tasks.renew_lease(renewed["id"], 1, 30.0, actor="w1")

    if in_sql:
        [(name, params, _)] = tx.ran
        assert name == "task_renew_lease_recorded"
        assert params["event_topic"].endswith("TaskRun.LeaseRenewed")
        assert params["event_source"] == "running"
    else:
        (event,) = appended_events(tx)
        assert isinstance(event, TaskRun.LeaseRenewed) and event.source == "running"


@pytest.mark.parametrize("in_sql", [False, True])
def test_a_lost_write_records_no_event(in_sql: bool) -> None:
    store, tx = writes(None, in_sql=in_sql)

    assert store.tasks.reclaim(uuid4(), actor="reaper") is None
    assert tx.deferred == []


def test_on_sqlite_a_finish_event_carries_a_user_result_that_looks_like_an_encoding() -> None:
    # The library would read {"_type_": ..., "_data_": ...} back as its own encoding.
    look_alike = {"_type_": "uuid_hex", "_data_": "not a uuid"}
    finished = row("succeeded", version=3, lease_owner=None, lease_expires_at=None)
    finished["result"] = look_alike
    store, tx = writes(finished, in_sql=False)

    store.tasks.finish(finished["id"], TASK_RUN_MACHINE.get("succeed"), 1, actor="w1")

    (event,) = appended_events(tx)
    assert isinstance(event, TaskRun.Succeeded) and event.result == look_alike
