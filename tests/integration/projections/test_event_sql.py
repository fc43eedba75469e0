"""A task transition's event, as PostgreSQL builds it in the transition's statement
(flowforge/projections/event_sql.py), reads back exactly as the event Python builds from
the row the statement returned (``event_from_row``, what SQLite stores).

Real PostgreSQL: each step of a task's life is written through the store, its stored
event read back through the event log's own mapper and compared, field by field, with
the Python event. User JSON that looks like the library's own encoding is the trap: the
SQL escape function is checked against the transcoder with hypothesis.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Json

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.base import event_from_row
from flowforge.aggregates.machines import REAPER_TRANSITION
from flowforge.aggregates.states import TaskRunState
from flowforge.app.service import FlowForge
from flowforge.projections.projector import TRANSACTION_NOW
from flowforge.projections.store import Store
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import Writes
from tests.helpers import RoundTrip
from tests.integration.projections.test_store import (
    LEASE_S,
    TINY_S,
    create_run,
    create_task,
    edge,
    run_edge,
    wait_for_clock,
)

pytestmark = pytest.mark.postgres
_Row = TypeVar("_Row", TaskRunRow, WorkflowRunRow)

ACTOR = "event-sql-test"
#: Objects that the library's decoder would take for its own encoding, nested or not.
RESERVED_KEYS = st.sampled_from(["_type_", "_data_", "a", "é", '"_type_"', "\\u"])
#: Text without NUL: PostgreSQL cannot read a JSON document holding one (the SQL escape
#: function's one limit: a finish escapes its result in Python, and an error, the JSON
#: later events carry from the row, holds no NUL: json_values.error_details).
TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=8)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(RESERVED_KEYS | TEXT, inner, max_size=3)
    ),
    max_leaves=8,
)
#: Look-alikes for certain, at the top and nested in one another.
LOOK_ALIKE = {"_type_": "uuid_hex", "_data_": "not a uuid"}
NESTED_LOOK_ALIKES = [{"a": {"_type_": 1, "_data_": [LOOK_ALIKE, {"_data_": 2}]}}, "_type_"]


def examples(count: int) -> settings:
    """Hypothesis over a real database: no deadline, the fixtures shared by examples."""
    return settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


@pytest.fixture
def store(pg_app: FlowForge) -> Store:
    return pg_app.store


@pytest.fixture
def task_id(store: Store) -> UUID:
    with store.write() as writes:
        run_id = create_run(writes)
        return create_task(writes, run_id, TaskRunState.READY)


def stored_event(store: Store, row: TaskRunRow | WorkflowRunRow) -> Any:
    """The event the log holds for ``row``'s version, read by the library's mapper."""
    with store.write() as writes:
        (record,) = [
            s
            for s in writes.rebuild.stored_events()
            if s.originator_id == row.id and s.originator_version == row.version
        ]
    return store._mapper.to_domain_event(record)


def assert_recorded(store: Store, row: _Row | None, event_class: type[Any], source: str) -> _Row:
    assert row is not None
    aggregate = task_run if isinstance(row, TaskRunRow) else workflow_run
    expected = event_from_row(
        aggregate.DECLARATION, event_class, row.values(), source=source, actor=ACTOR
    )
    actual = stored_event(store, row)
    assert type(actual) is event_class
    assert vars(actual) == vars(expected)
    return row


def test_postgres_builds_its_task_events_in_sql(store: Store) -> None:
    with store.write() as writes:
        assert isinstance(writes, Writes) and writes.recording.events_in_sql


def test_every_step_of_a_task_records_the_event_python_would_build(
    store: Store, task_id: UUID
) -> None:
    events = task_run.EVENT_FOR_TRANSITION
    with store.write() as writes:
        claimed = writes.tasks.claim(task_id, ACTOR, TINY_S)
    claimed = assert_recorded(store, claimed, events["claim"], "ready")
    with store.write() as writes:
        renewed = writes.tasks.renew_lease(task_id, claimed.fencing_token, TINY_S, actor=ACTOR)
    assert_recorded(store, renewed, task_run.TaskRun.LeaseRenewed, "running")
    assert renewed is not None and renewed.lease_expires_at is not None
    wait_for_clock(store, renewed.lease_expires_at)
    with store.write() as writes:
        reclaimed = writes.tasks.reclaim(task_id, actor=ACTOR)
    assert_recorded(store, reclaimed, events[REAPER_TRANSITION.name], "running")
    with store.write() as writes:
        claimed = writes.tasks.claim(task_id, ACTOR, LEASE_S)
    claimed = assert_recorded(store, claimed, events["claim"], "ready")
    # An error whose keys include the library's reserved ones: carried by every event
    # after it, through the SQL escape function.
    error = {"type": "E", "message": "m", "traceback": "", "_type_": "x", "_data_": "y"}
    with store.write() as writes:
        failed = writes.tasks.finish(
            task_id, edge("fail"), claimed.fencing_token, actor=ACTOR, error=error
        )
    assert_recorded(store, failed, events["fail"], "running")
    with store.write() as writes:
        retrying = writes.tasks.schedule_retry(task_id, 0.0, actor=ACTOR)
    assert_recorded(store, retrying, events["schedule_retry"], "failed")
    with store.write() as writes:
        ready = writes.tasks.retry_ready(task_id, actor=ACTOR)
    assert_recorded(store, ready, events["retry_ready"], "retrying")
    with store.write() as writes:
        claimed = writes.tasks.claim(task_id, ACTOR, LEASE_S, last=True)
    claimed = assert_recorded(store, claimed, events["claim"], "ready")
    assert claimed.error == error
    with store.write() as writes:
        cancelled = writes.tasks.finish(
            task_id, edge("cancel_running"), claimed.fencing_token, actor=ACTOR
        )
    assert_recorded(store, cancelled, events["cancel_running"], "running")


def test_a_pending_task_promoted_or_cancelled_records_its_event(store: Store) -> None:
    with store.write() as writes:
        run_id = create_run(writes)
        promoted_id = create_task(writes, run_id, TaskRunState.PENDING, "b")
        cancelled_id = create_task(writes, run_id, TaskRunState.PENDING, "c")
    with store.write() as writes:
        promoted = writes.tasks.move(promoted_id, edge("dependencies_satisfied"), actor=ACTOR)
        cancelled = writes.tasks.move(cancelled_id, edge("cancel_pending"), actor=ACTOR)
    events = task_run.EVENT_FOR_TRANSITION
    assert_recorded(store, promoted, events["dependencies_satisfied"], "pending")
    assert_recorded(store, cancelled, events["cancel_pending"], "pending")


def test_every_run_edge_records_the_event_python_would_build(store: Store) -> None:
    events = workflow_run.EVENT_FOR_TRANSITION
    with store.write() as writes:
        done_id, failed_id, cancelled_id = (create_run(writes) for _ in range(3))
        task_id = create_task(writes, done_id, TaskRunState.READY)
    with store.write() as writes:
        started, _ = writes.runs.start(done_id, actor=ACTOR)
        failed_start = writes.runs.move(failed_id, run_edge("start"), actor=ACTOR)
        cancelled = writes.runs.cancel(cancelled_id, actor=ACTOR)  # built in Python
    assert_recorded(store, started, events["start"], "pending")
    assert_recorded(store, failed_start, events["start"], "pending")
    assert_recorded(store, cancelled, events["cancel_before_start"], "pending")
    with store.write() as writes:
        failed = writes.runs.move(failed_id, run_edge("fail"), actor=ACTOR)
        claimed = writes.tasks.claim(task_id, ACTOR, LEASE_S)
        assert claimed is not None
        writes.tasks.finish(task_id, edge("succeed"), claimed.fencing_token, actor=ACTOR)
        completion, succeeded = writes.runs.succeed_when_complete(done_id, actor=ACTOR)
    assert completion == "succeeded"
    assert_recorded(store, failed, events["fail"], "running")
    assert_recorded(store, succeeded, events["succeed"], "running")


@examples(40)
@given(result=JSON_VALUES)
@example(result=LOOK_ALIKE)
@example(result=NESTED_LOOK_ALIKES)
@example(result={"k\x00": [LOOK_ALIKE, "\x00"]})
def test_a_success_records_any_user_result_as_it_was(store: Store, result: Any) -> None:
    with store.write() as writes:
        run_id = create_run(writes)
        task_id = create_task(writes, run_id, TaskRunState.READY)
        claimed = writes.tasks.claim(task_id, ACTOR, LEASE_S)
    assert claimed is not None
    with store.write() as writes:
        done = writes.tasks.finish(
            task_id, edge("succeed"), claimed.fencing_token, actor=ACTOR, result=result
        )
    done = assert_recorded(store, done, task_run.EVENT_FOR_TRANSITION["succeed"], "running")
    assert stored_event(store, done).result == result


@examples(60)
@given(value=JSON_VALUES)
@example(value=LOOK_ALIKE)
@example(value=NESTED_LOOK_ALIKES)
def test_the_sql_escape_function_escapes_as_the_transcoder_does(
    store: Store, postgres_url: str, value: Any
) -> None:
    transcoder = store._mapper.transcoder
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute("SELECT flowforge_event_json(%s::json)", (Json(value),)).fetchone()
    assert row is not None
    escaped = row[0]
    assert escaped == json.loads(transcoder.encode(value))
    # ... which the library's decoder reads back as the user's value.
    assert transcoder.decode(json.dumps(escaped).encode()) == value


#: Inputs that spell the stand-in for the transaction's clock, bare and quoted: JSON
#: escapes the quotes, so the state's one real timestamp is all SQL replaces.
PLACEHOLDER_LOOK_ALIKES = {
    "bare": TRANSACTION_NOW.isoformat(),
    "quoted": f'"{TRANSACTION_NOW.isoformat()}"',
    "nested": [{"_type_": "datetime_iso", "_data_": TRANSACTION_NOW.isoformat()}],
}


def test_a_run_is_created_in_one_round_trip_its_events_at_the_transaction_clock(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    definition = {
        "name": "two",
        "tasks": [{"key": "a", "type": "t"}, {"key": "b", "type": "t", "depends_on": ["a"]}],
    }
    round_trips.clear()
    run_id = pg_app.start_workflow_run(definition, PLACEHOLDER_LOOK_ALIKES)
    assert len(round_trips) == 1 and round_trips[0].committed
    run = pg_app.get_workflow_run(run_id)
    assert run.created_at > TRANSACTION_NOW
    aggregate = pg_app.workflow_run_aggregate(run_id)
    assert (aggregate.created_on, aggregate.inputs) == (run.created_at, PLACEHOLDER_LOOK_ALIKES)
    for task in pg_app.task_runs(run_id):
        assert task.created_at == run.created_at  # one transaction, one clock
        assert pg_app.task_run_aggregate(task.id).created_on == run.created_at
    (dispatch,) = pg_app.dispatches_of(
        next(t.id for t in pg_app.task_runs(run_id) if not t.depends_on)
    )
    assert dispatch.created_at == run.created_at
