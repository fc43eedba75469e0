"""The execution model's contract, on both backends.

Every test takes the ``app`` fixture, which runs it once on PostgreSQL and once on SQLite:
one contract, two implementations (docs/execution-model.md, "The transition protocol",
"Fencing tokens", "Leases and the reaper", "Retries"). The rows of the spec's contract table are
:class:`TestTransitionContract`; the state tables, edge by edge, are
:class:`TestTaskRunEdges` and :class:`TestWorkflowRunEdges`.

Leases are made to expire by claiming with a tiny lease and polling ``expired_leases()``
until the database's clock has passed it: that waits for the one clock that decides
leases, it does not widen any race window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sqlite3
import time
from collections.abc import Mapping
from itertools import product
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from flowforge import errors
from flowforge.aggregates.machines import (
    CARRY_OVER_TRANSITION,
    TASK_RUN_MACHINE,
    WORKFLOW_RUN_MACHINE,
)
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge
from flowforge.processes.transport import InMemoryDispatchChannel
from tests.helpers import (
    FORGED_TOPIC,
    TASK_CREATED_TOPIC,
    claim,
    forge_event,
    logged,
    marks,
    wait_until,
    wait_until_expired,
)

LEASE_S = 30.0
#: A lease that has run out by the time the next statement runs, or a few polls later.
TINY_LEASE_S = 0.05
#: How long a test waits for the database's clock to pass a lease or a retry's due time.
CLOCK_DEADLINE_S = 5.0
POLL_S = 0.01

ROOT, CHILD = "extract", "load"
ERROR = {"type": "KeyError", "message": "'id'", "traceback": "Traceback (most recent call last)"}
RESULT = {"rows": 3, "names": ["a", "b"], "nested": {"ok": True, "ratio": 0.5, "none": None}}

#: The TaskRun edges that spend a lease; only finish_task_run takes them.
FINISH_EDGES = sorted(t.name for t in TASK_RUN_MACHINE if t.requires_lease)


def _definition(max_attempts: int = 3) -> dict[str, Any]:
    return {
        "name": "contract",
        "retry": {"max_attempts": max_attempts, "backoff_seconds": 0.0, "jitter": 0.0},
        "tasks": [
            {"key": ROOT, "type": "extract_rows"},
            {"key": CHILD, "type": "load_rows", "depends_on": [ROOT]},
        ],
    }


def start_run(app: FlowForge, *, max_attempts: int = 3) -> tuple[UUID, dict[str, TaskRunView]]:
    """A new run of ROOT -> CHILD: ROOT is created ready, CHILD pending."""
    run_id = app.start_workflow_run(_definition(max_attempts))
    return run_id, {t.task_key: t for t in app.task_runs(run_id)}


def task_in(app: FlowForge, state: str, *, lease_s: float = LEASE_S) -> tuple[UUID, int]:
    """A task run driven to ``state`` through the service, and its fencing token."""
    _, tasks = start_run(app)
    if state == "pending":
        return tasks[CHILD].id, 0
    task_run_id = tasks[ROOT].id
    if state == "ready":
        return task_run_id, 0
    token = claim(app, task_run_id, "worker-1", lease_s).fencing_token
    if state == "running":
        return task_run_id, token
    assert app.finish_task_run(task_run_id, token, "fail", error=ERROR)
    if state == "failed":
        return task_run_id, token
    assert app.schedule_retry(task_run_id)
    assert state == "retrying", f"no recipe for a task run in {state!r}"
    return task_run_id, token


def take_task_edge(app: FlowForge, name: str, task_run_id: UUID, token: int) -> bool:
    """Take a TaskRun edge through the entry point the service offers for it."""
    if name == "claim":
        return app.claim_task_run(task_run_id, "worker-2", LEASE_S) is not None
    if name in FINISH_EDGES:
        result = RESULT if name == "succeed" else None
        error = ERROR if name == "fail" else None
        return app.finish_task_run(task_run_id, token, name, result, error)
    if name == "reap_lease":
        return app.reclaim_task_run(task_run_id)
    return app.transition_task_run(task_run_id, name)


def run_in(app: FlowForge, state: str) -> UUID:
    run_id, _ = start_run(app)
    if state == "running":
        assert app.transition_workflow_run(run_id, "start")
    return run_id


def run_entries(app: FlowForge, run_id: UUID) -> list[Any]:
    return [e for e in app.run_history(run_id) if e.aggregate == "WorkflowRun"]


def edge_pairs(machine: Any) -> list[tuple[str, str]]:
    """Every ordered pair of edges leaving the same state, an edge with itself included.

    Not the rerun's ``carry_over``: no writer takes it on an existing row (only a rerun,
    on the task it creates, before anyone can see it), and every writer that tries is
    refused before any SQL (tests/integration/test_rerun.py)."""
    return [
        (first.name, second.name)
        for first, second in product(machine, machine)
        if first.source == second.source
        and CARRY_OVER_TRANSITION.name not in (first.name, second.name)
    ]


# --- a connection of the test's own, beside the app's pool -------------------------------

#: The event store's table on each backend (the eventsourcing recorders name them).
COUNT_EVENTS = {
    "postgres": "SELECT count(*) FROM flowforge_events",
    "sqlite": "SELECT count(*) FROM stored_events",
}
TASK_RUN_COLUMNS = (
    "workflow_run_id", "task_key", "task_type", "depends_on", "max_attempts", "state",
    "fencing_token", "attempt", "lease_owner", "lease_expires_at", "started_at",
    "finished_at", "retry_due_at", "result", "error", "version", "created_at", "updated_at",
)  # fmt: skip


def _copy_task_run(task_key: str) -> str:
    """An INSERT copying a task run under ``%(new_id)s``, its key computed by ``task_key``."""
    values = ", ".join(task_key if c == "task_key" else c for c in TASK_RUN_COLUMNS)
    return (
        f"INSERT INTO task_runs (id, {', '.join(TASK_RUN_COLUMNS)}) "
        f"SELECT %(new_id)s, {values} FROM task_runs WHERE id = %(id)s"
    )


COPY_TASK_RUN = _copy_task_run("task_key")
COPY_TASK_RUN_WITH_NEW_KEY = _copy_task_run("task_key || %(suffix)s")
_PSYCOPG_PARAM = re.compile(r"%\((\w+)\)s")


class DirectDatabase:
    """The fixture's database through the driver, bypassing FlowForge: to count events
    and to attempt writes the service never makes, so the constraints are the database's."""

    def __init__(self, dialect: str, url: str) -> None:
        self.dialect = dialect
        self._url = url
        self.integrity_error: type[Exception] = (
            psycopg.IntegrityError if dialect == "postgres" else sqlite3.IntegrityError
        )

    def execute(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        if self.dialect == "postgres":
            with psycopg.connect(self._url, autocommit=True) as conn:
                cursor = conn.execute(statement, dict(params or {}))
                return cursor.fetchall() if cursor.description else []
        sqlite_params = {
            k: str(v) if isinstance(v, UUID) else v for k, v in (params or {}).items()
        }
        path = self._url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as conn:
            return conn.execute(_PSYCOPG_PARAM.sub(r":\1", statement), sqlite_params).fetchall()

    def count_events(self) -> int:
        ((count,),) = self.execute(COUNT_EVENTS[self.dialect])
        return int(count)


@pytest.fixture
def direct(app: FlowForge, request: pytest.FixtureRequest) -> DirectDatabase:
    dialect = app.database.dialect
    url = request.getfixturevalue("postgres_url" if dialect == "postgres" else "sqlite_url")
    return DirectDatabase(dialect, url)


class _NoDatabase:
    """Stands in for the app's database: any use of it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the database was used ({name}) before the error was raised")


# --- the contract table ------------------------------------------------------------------

ILLEGAL_TASK_TRANSITIONS = ["explode", "", "start", "CLAIM", "reap"]
ILLEGAL_FINISH_OUTCOMES = ["explode", "claim", "dependencies_satisfied", "reap_lease"]
ILLEGAL_RUN_TRANSITIONS = ["explode", "claim", "cancel_pending", "reap_lease"]


class TestTransitionContract:
    """The spec's table "The contract callers rely on", row by row."""

    @pytest.mark.parametrize("name", ILLEGAL_TASK_TRANSITIONS)
    def test_a_task_transition_not_in_the_table_raises_the_same_for_any_id_and_appends_nothing(
        self, app: FlowForge, direct: DirectDatabase, name: str
    ) -> None:
        ready, _ = task_in(app, "ready")
        before, row = direct.count_events(), app.get_task_run(ready)
        raised = []
        for task_run_id in (ready, uuid4()):
            with pytest.raises(errors.IllegalTransitionError) as info:
                app.transition_task_run(task_run_id, name)
            raised.append(str(info.value))
        assert raised[0] == raised[1]
        assert direct.count_events() == before
        assert app.get_task_run(ready) == row
        # The contrast: a legal edge of a row that does not exist is a lost race, not an error.
        assert app.transition_task_run(uuid4(), "dependencies_satisfied") is False

    @pytest.mark.parametrize("name", ILLEGAL_TASK_TRANSITIONS)
    def test_a_task_transition_not_in_the_table_raises_before_any_sql_runs(
        self, app: FlowForge, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(errors.IllegalTransitionError):
            app.transition_task_run(uuid4(), name)

    @pytest.mark.parametrize("outcome", ILLEGAL_FINISH_OUTCOMES)
    def test_finishing_with_an_outcome_that_is_not_a_finish_edge_raises_before_any_sql(
        self, app: FlowForge, direct: DirectDatabase, outcome: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        running, token = task_in(app, "running")
        before = direct.count_events()
        for task_run_id in (running, uuid4()):
            with pytest.raises(errors.IllegalTransitionError):
                app.finish_task_run(task_run_id, token, outcome)
        assert direct.count_events() == before
        assert app.get_task_run(running).state == "running"
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(errors.IllegalTransitionError):
            app.finish_task_run(uuid4(), token, outcome)

    @pytest.mark.parametrize("name", ILLEGAL_RUN_TRANSITIONS)
    def test_a_run_transition_not_in_the_table_raises_the_same_for_any_id_before_any_sql(
        self,
        app: FlowForge,
        direct: DirectDatabase,
        name: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        run_id = run_in(app, "running")
        before = direct.count_events()
        raised = []
        for candidate in (run_id, uuid4()):
            with pytest.raises(errors.IllegalTransitionError) as info:
                app.transition_workflow_run(candidate, name)
            raised.append(str(info.value))
        assert raised[0] == raised[1]
        assert direct.count_events() == before
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(errors.IllegalTransitionError):
            app.transition_workflow_run(uuid4(), name)

    @pytest.mark.parametrize("name", FINISH_EDGES)
    def test_a_lease_requiring_transition_through_transition_task_run_names_finish_task_run(
        self, app: FlowForge, direct: DirectDatabase, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        running, _ = task_in(app, "running")
        before, row = direct.count_events(), app.get_task_run(running)
        for task_run_id in (running, uuid4()):
            with pytest.raises(errors.LeaseRequiredError, match="finish_task_run"):
                app.transition_task_run(task_run_id, name)
        assert direct.count_events() == before
        assert app.get_task_run(running) == row
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(errors.LeaseRequiredError, match="finish_task_run"):
            app.transition_task_run(uuid4(), name)

    def test_reap_lease_through_transition_task_run_is_refused_as_reaper_only(
        self, app: FlowForge, direct: DirectDatabase, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        running, _ = task_in(app, "running", lease_s=TINY_LEASE_S)
        wait_until_expired(app, running)
        before, row = direct.count_events(), app.get_task_run(running)
        for task_run_id in (running, uuid4()):
            with pytest.raises(errors.ReaperOnlyTransitionError, match="reclaim_task_run"):
                app.transition_task_run(task_run_id, "reap_lease")
        assert direct.count_events() == before
        assert app.get_task_run(running) == row
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(errors.ReaperOnlyTransitionError):
            app.transition_task_run(uuid4(), "reap_lease")

    def test_a_legal_transition_that_wins_returns_true(self, app: FlowForge) -> None:
        pending, _ = task_in(app, "pending")
        assert app.transition_task_run(pending, "dependencies_satisfied") is True
        assert app.get_task_run(pending).state == "ready"

    def test_a_legal_transition_another_writer_took_first_returns_false_and_appends_nothing(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        pending, _ = task_in(app, "pending")
        assert app.transition_task_run(pending, "cancel_pending") is True
        history, row, events = (
            app.history(pending),
            app.get_task_run(pending),
            direct.count_events(),
        )
        assert app.transition_task_run(pending, "dependencies_satisfied") is False
        assert app.history(pending) == history
        assert app.get_task_run(pending) == row
        assert direct.count_events() == events
        assert app.dispatches_of(pending) == []


# --- the state tables, edge by edge ------------------------------------------------------


class TestTaskRunEdges:
    @pytest.mark.parametrize(("first", "second"), edge_pairs(TASK_RUN_MACHINE))
    def test_an_edge_from_its_source_state_wins_and_a_later_edge_from_that_state_loses(
        self, app: FlowForge, direct: DirectDatabase, first: str, second: str
    ) -> None:
        edge = TASK_RUN_MACHINE.get(first)
        reaping = "reap_lease" in (first, second)
        task_run_id, token = task_in(
            app, edge.source.value, lease_s=TINY_LEASE_S if reaping else LEASE_S
        )
        if reaping:
            wait_until_expired(app, task_run_id)
        entries = len(app.history(task_run_id))

        assert take_task_edge(app, first, task_run_id, token) is True
        row, history, events = (
            app.get_task_run(task_run_id),
            app.history(task_run_id),
            direct.count_events(),
        )
        assert row.state == edge.target.value
        assert len(history) == entries + 1
        last = history[-1]
        assert (last.transition, last.source, last.target) == (
            first,
            edge.source.value,
            edge.target.value,
        )

        # The second writer read the same source state; the first writer got there first.
        assert take_task_edge(app, second, task_run_id, token) is False
        assert app.get_task_run(task_run_id) == row
        assert app.history(task_run_id) == history
        assert direct.count_events() == events

    def test_a_finish_with_a_stale_token_returns_false_and_leaves_the_row_unchanged(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        running, token = task_in(app, "running")
        row, events = app.get_task_run(running), direct.count_events()
        for stale in (token - 1, token + 1, 0):
            for outcome in FINISH_EDGES:
                assert app.finish_task_run(running, stale, outcome, None, ERROR) is False
        assert app.get_task_run(running) == row
        assert direct.count_events() == events
        assert app.finish_task_run(uuid4(), token, "succeed") is False
        assert app.finish_task_run(running, token, "succeed", RESULT) is True

    def test_a_claim_returns_the_new_token_one_above_the_old_and_the_attempt(
        self, app: FlowForge
    ) -> None:
        ready, _ = task_in(app, "ready")
        old = app.get_task_run(ready).fencing_token
        won = claim(app, ready, "worker-7")
        row = app.get_task_run(ready)
        assert won.task_run_id == ready
        assert won.fencing_token == old + 1 == row.fencing_token
        assert won.attempt == row.attempt == 1
        assert won.lease_expires_at == row.lease_expires_at
        assert row.lease_owner == "worker-7"
        assert app.claim_task_run(ready, "worker-8", LEASE_S) is None

        assert app.finish_task_run(ready, won.fencing_token, "fail", error=ERROR)
        assert app.schedule_retry(ready)
        assert app.retry_ready(ready)
        again = claim(app, ready, "worker-8")
        assert (again.fencing_token, again.attempt) == (old + 2, 2)

    def test_the_first_claim_sets_started_at_and_a_claim_after_a_reap_keeps_it(
        self, app: FlowForge
    ) -> None:
        ready, _ = task_in(app, "ready")
        assert app.get_task_run(ready).started_at is None
        claim(app, ready, "worker-1", TINY_LEASE_S)
        started_at = app.get_task_run(ready).started_at
        assert started_at is not None
        wait_until_expired(app, ready)
        assert app.reclaim_task_run(ready)
        assert app.get_task_run(ready).started_at == started_at
        second = claim(app, ready, "worker-2")
        row = app.get_task_run(ready)
        assert row.started_at == started_at
        assert row.lease_expires_at == second.lease_expires_at
        assert row.updated_at > started_at

    def test_a_claim_after_a_retry_keeps_the_first_started_at(self, app: FlowForge) -> None:
        ready, _ = task_in(app, "ready")
        first = claim(app, ready, "worker-1")
        started_at = app.get_task_run(ready).started_at
        assert started_at is not None
        assert app.finish_task_run(ready, first.fencing_token, "fail", error=ERROR)
        assert app.schedule_retry(ready)
        assert app.retry_ready(ready)
        claim(app, ready, "worker-2")
        row = app.get_task_run(ready)
        assert (row.attempt, row.started_at) == (2, started_at)

    def test_a_success_persists_the_result_as_json_and_no_error(self, app: FlowForge) -> None:
        running, token = task_in(app, "running")
        assert app.finish_task_run(running, token, "succeed", RESULT, ERROR)
        row = app.get_task_run(running)
        assert (row.state, row.result, row.error) == ("succeeded", RESULT, None)
        assert row.finished_at is not None
        assert (row.lease_owner, row.lease_expires_at) == (None, None)

    def test_a_failure_persists_the_error_type_message_and_traceback_and_no_result(
        self, app: FlowForge
    ) -> None:
        running, token = task_in(app, "running")
        assert app.finish_task_run(running, token, "fail", RESULT, ERROR)
        row = app.get_task_run(running)
        assert (row.state, row.result, row.error) == ("failed", None, ERROR)
        assert set(row.error or {}) == {"type", "message", "traceback"}
        assert row.finished_at is not None

    def test_a_failure_without_a_traceback_records_an_empty_one(self, app: FlowForge) -> None:
        running, token = task_in(app, "running")
        assert app.finish_task_run(running, token, "fail", error={"type": "E", "message": "m"})
        assert app.get_task_run(running).error == {"type": "E", "message": "m", "traceback": ""}

    @pytest.mark.parametrize(
        "result",
        [object(), {"ratio": float("nan")}, {1, 2}, b"bytes", {"when": time}],
        ids=["object", "nan", "set", "bytes", "module"],
    )
    def test_a_result_that_is_not_json_raises_value_error_before_any_write(
        self,
        app: FlowForge,
        direct: DirectDatabase,
        result: object,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        running, token = task_in(app, "running")
        row, events = app.get_task_run(running), direct.count_events()
        with pytest.raises(ValueError, match="JSON"):
            app.finish_task_run(running, token, "succeed", result)
        assert app.get_task_run(running) == row
        assert direct.count_events() == events
        monkeypatch.setattr(app, "database", _NoDatabase())
        with pytest.raises(ValueError, match="JSON"):
            app.finish_task_run(uuid4(), token, "succeed", result)

    def test_an_error_without_type_and_message_raises_value_error_before_any_write(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        running, token = task_in(app, "running")
        events = direct.count_events()
        with pytest.raises(ValueError, match="type"):
            app.finish_task_run(running, token, "fail", error={"message": "no type"})
        assert direct.count_events() == events
        assert app.get_task_run(running).state == "running"

    def test_renew_lease_extends_the_lease_only_with_the_current_token(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        running, token = task_in(app, "running")
        before = app.get_task_run(running)
        assert app.renew_lease(running, token, 10 * LEASE_S, actor="worker-1") is True
        renewed = app.get_task_run(running)
        assert before.lease_expires_at is not None
        assert renewed.lease_expires_at is not None
        assert renewed.lease_expires_at > before.lease_expires_at
        assert (renewed.state, renewed.fencing_token, renewed.lease_owner) == (
            "running",
            token,
            "worker-1",
        )
        assert app.history(running)[-1].transition == "renew_lease"

        events = direct.count_events()
        for stale in (token - 1, token + 1):
            assert app.renew_lease(running, stale, 10 * LEASE_S) is False
        assert app.get_task_run(running) == renewed
        assert direct.count_events() == events

        assert app.finish_task_run(running, token, "succeed")
        assert app.renew_lease(running, token, LEASE_S) is False
        assert app.get_task_run(running).state == "succeeded"

    def test_schedule_retry_reuses_the_row_with_attempt_plus_one_and_clears_finish_and_lease(
        self, app: FlowForge
    ) -> None:
        run_id, tasks = start_run(app)
        task_run_id = tasks[ROOT].id
        won = claim(app, task_run_id, "worker-1")
        assert app.finish_task_run(task_run_id, won.fencing_token, "fail", error=ERROR)
        failed = app.get_task_run(task_run_id)
        assert failed.finished_at is not None

        assert app.schedule_retry(task_run_id) is True
        row = app.get_task_run(task_run_id)
        assert row.id == task_run_id
        assert (row.state, row.attempt) == ("retrying", failed.attempt + 1)
        assert (row.finished_at, row.lease_owner, row.lease_expires_at) == (None, None, None)
        assert row.fencing_token == won.fencing_token
        assert row.started_at == failed.started_at
        assert sorted(t.id for t in app.task_runs(run_id)) == sorted(t.id for t in tasks.values())

    def test_schedule_retry_returns_false_once_the_attempts_are_used_up(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        _, tasks = start_run(app, max_attempts=1)
        task_run_id = tasks[ROOT].id
        won = claim(app, task_run_id, "worker-1")
        assert app.finish_task_run(task_run_id, won.fencing_token, "fail", error=ERROR)
        row, events = app.get_task_run(task_run_id), direct.count_events()
        assert app.schedule_retry(task_run_id) is False
        assert app.get_task_run(task_run_id) == row
        assert direct.count_events() == events

    def test_retry_ready_returns_false_until_the_retry_is_due(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        failed, _ = task_in(app, "failed")
        assert app.schedule_retry(failed, delay_seconds=3600)
        row, events = app.get_task_run(failed), direct.count_events()
        assert app.retry_ready(failed) is False
        assert app.get_task_run(failed) == row
        assert direct.count_events() == events
        assert len(app.dispatches_of(failed)) == 1  # only the one from its creation

    def test_retry_ready_wins_once_the_database_clock_passes_the_due_time(
        self, app: FlowForge
    ) -> None:
        failed, _ = task_in(app, "failed")
        assert app.schedule_retry(failed, delay_seconds=0.2)
        due_at = app.get_task_run(failed).retry_due_at
        assert due_at is not None
        wait_until(lambda: app.retry_ready(failed), CLOCK_DEADLINE_S, "the retry became due")
        made_ready = app.history(failed)[-1]
        assert made_ready.transition == "retry_ready"
        # The event's time is the database's clock at the write that won.
        assert made_ready.at >= due_at
        row = app.get_task_run(failed)
        assert (row.state, row.retry_due_at) == ("ready", None)

    def test_the_outbox_gets_a_row_with_the_token_exactly_when_a_task_becomes_ready(
        self, app: FlowForge
    ) -> None:
        _, tasks = start_run(app)
        root, child = tasks[ROOT].id, tasks[CHILD].id

        def tokens(task_run_id: UUID) -> list[int]:
            return [d.fencing_token for d in app.dispatches_of(task_run_id)]

        assert tokens(root) == [0]  # created ready
        assert tokens(child) == []  # created pending
        first = claim(app, root, "worker-1", TINY_LEASE_S)
        assert tokens(root) == [0]
        wait_until_expired(app, root)
        assert app.reclaim_task_run(root)  # reap_lease: ready again, token + 1
        assert tokens(root) == [0, 2]
        assert app.reclaim_task_run(root) is False
        second = claim(app, root, "worker-2")
        assert app.renew_lease(root, second.fencing_token, LEASE_S)
        assert app.finish_task_run(root, first.fencing_token, "succeed") is False
        assert app.finish_task_run(root, second.fencing_token, "fail", error=ERROR)
        assert app.schedule_retry(root)
        assert tokens(root) == [0, 2]
        assert app.retry_ready(root)  # retry_ready
        assert tokens(root) == [0, 2, 3]
        third = claim(app, root, "worker-3")
        assert tokens(child) == []
        # The finish advances the run: its dependent becomes ready, with its outbox row.
        assert app.finish_task_run(root, third.fencing_token, "succeed", RESULT)
        assert tokens(root) == [0, 2, 3]
        assert tokens(child) == [0]
        assert app.transition_task_run(child, "dependencies_satisfied") is False
        assert app.transition_task_run(child, "cancel_ready")
        assert tokens(child) == [0]

        for task_run_id, key in ((root, ROOT), (child, CHILD)):
            dispatches = app.dispatches_of(task_run_id)
            assert {(d.task_run_id, d.task_key) for d in dispatches} == {(task_run_id, key)}
            assert all(d.published_at is None for d in dispatches)
            # One outbox row per entry into ready in the audit log, with its token.
            became_ready = [
                e.fencing_token for e in app.history(task_run_id) if e.target == "ready"
            ]
            assert tokens(task_run_id) == became_ready

    def test_the_audit_history_lists_every_transition_with_actor_attempt_token_and_states(
        self, app: FlowForge
    ) -> None:
        ready, _ = task_in(app, "ready")
        first = claim(app, ready, "worker-1")
        assert app.renew_lease(ready, first.fencing_token, LEASE_S, actor="worker-1")
        assert app.finish_task_run(
            ready, first.fencing_token, "fail", error=ERROR, actor="worker-1"
        )
        assert app.schedule_retry(ready)
        assert app.retry_ready(ready)
        claim(app, ready, "worker-2", TINY_LEASE_S)
        wait_until_expired(app, ready)
        assert app.reap_expired_leases() == [ready]
        third = claim(app, ready, "worker-3")
        assert app.finish_task_run(ready, third.fencing_token, "succeed", RESULT, actor="worker-3")

        history = app.history(ready)
        assert [
            (e.transition, e.source, e.target, e.actor, e.attempt, e.fencing_token)
            for e in history
        ] == [
            ("create", None, "ready", "user", 1, 0),
            ("claim", "ready", "running", "worker-1", 1, 1),
            ("renew_lease", "running", "running", "worker-1", 1, 1),
            ("fail", "running", "failed", "worker-1", 1, 1),
            ("schedule_retry", "failed", "retrying", "scheduler", 2, 1),
            ("retry_ready", "retrying", "ready", "scheduler", 2, 1),
            ("claim", "ready", "running", "worker-2", 2, 2),
            ("reap_lease", "running", "ready", "reaper", 2, 3),
            ("claim", "ready", "running", "worker-3", 2, 4),
            ("succeed", "running", "succeeded", "worker-3", 2, 4),
        ]
        assert [e.version for e in history] == list(range(1, len(history) + 1))
        assert [e.at for e in history] == sorted(e.at for e in history)
        assert {e.aggregate_id for e in history} == {ready}
        assert history[1].lease_owner == "worker-1"
        assert history[3].error == ERROR
        assert history[-1].result == RESULT

    def test_the_aggregate_rebuilt_from_events_agrees_with_the_row_after_every_step(
        self, app: FlowForge
    ) -> None:
        _, tasks = start_run(app)
        root, child = tasks[ROOT].id, tasks[CHILD].id

        def agrees(task_run_id: UUID) -> None:
            snapshot = app.task_run_aggregate(task_run_id).snapshot()
            row = dataclasses.asdict(app.get_task_run(task_run_id))
            assert {k: row[k] for k in snapshot} == snapshot

        agrees(root)
        agrees(child)
        won = claim(app, root, "worker-1", TINY_LEASE_S)
        agrees(root)
        assert app.renew_lease(root, won.fencing_token, TINY_LEASE_S)
        agrees(root)
        wait_until_expired(app, root)
        assert app.reclaim_task_run(root)
        agrees(root)
        won = claim(app, root, "worker-2")
        assert app.finish_task_run(root, won.fencing_token, "fail", error=ERROR)
        agrees(root)
        assert app.schedule_retry(root, delay_seconds=3600)
        agrees(root)
        assert app.transition_task_run(child, "cancel_pending")
        agrees(child)

        _, tasks = start_run(app)
        other = tasks[ROOT].id
        won = claim(app, other, "worker-3")
        assert app.finish_task_run(other, won.fencing_token, "succeed", RESULT)
        agrees(other)


class TestWorkflowRunEdges:
    @pytest.mark.parametrize(("first", "second"), edge_pairs(WORKFLOW_RUN_MACHINE))
    def test_a_run_edge_from_its_source_state_wins_and_a_later_edge_from_that_state_loses(
        self, app: FlowForge, direct: DirectDatabase, first: str, second: str
    ) -> None:
        edge = WORKFLOW_RUN_MACHINE.get(first)
        run_id = run_in(app, edge.source.value)
        entries = len(run_entries(app, run_id))
        assert app.transition_workflow_run(run_id, first) is True
        row = app.get_workflow_run(run_id)
        assert row.state == edge.target.value
        history = run_entries(app, run_id)
        assert len(history) == entries + 1
        assert (history[-1].transition, history[-1].source, history[-1].target) == (
            first,
            edge.source.value,
            edge.target.value,
        )
        events = direct.count_events()
        assert app.transition_workflow_run(run_id, second) is False
        assert app.get_workflow_run(run_id) == row
        assert direct.count_events() == events

    def test_start_sets_started_at_and_advance_starts_a_pending_run_once(
        self, app: FlowForge
    ) -> None:
        run_id, _ = start_run(app)
        assert app.get_workflow_run(run_id).started_at is None
        assert app.advance_workflow_run(run_id).started is True
        row = app.get_workflow_run(run_id)
        assert (row.state, row.finished_at) == ("running", None)
        assert row.started_at is not None
        assert app.advance_workflow_run(run_id).started is False
        assert app.transition_workflow_run(run_id, "start") is False

    def test_cancelling_a_pending_run_takes_cancel_before_start_and_cancels_its_tasks(
        self, app: FlowForge
    ) -> None:
        run_id, tasks = start_run(app)
        assert app.cancel_workflow_run(run_id) is True
        row = app.get_workflow_run(run_id)
        assert row.state == "cancelled"
        assert row.finished_at is not None
        assert [e.transition for e in run_entries(app, run_id)] == [
            "create",
            "cancel_before_start",
        ]
        assert app.history(tasks[ROOT].id)[-1].transition == "cancel_ready"
        assert app.history(tasks[CHILD].id)[-1].transition == "cancel_pending"
        assert {t.state for t in app.task_runs(run_id)} == {"cancelled"}

    def test_cancelling_a_running_run_takes_cancel_and_fences_out_its_running_worker(
        self, app: FlowForge
    ) -> None:
        run_id, tasks = start_run(app)
        assert app.advance_workflow_run(run_id).started
        won = claim(app, tasks[ROOT].id, "worker-1")
        assert app.cancel_workflow_run(run_id) is True
        assert [e.transition for e in run_entries(app, run_id)] == ["create", "start", "cancel"]
        root = app.get_task_run(tasks[ROOT].id)
        assert (root.state, root.lease_expires_at) == ("cancelled", None)
        assert app.history(root.id)[-1].transition == "cancel_running"
        assert app.finish_task_run(root.id, won.fencing_token, "succeed", RESULT) is False
        assert app.get_task_run(root.id) == root

    @pytest.mark.parametrize("finish", ["succeed", "fail", "cancel"])
    def test_cancelling_a_finished_run_returns_false_and_appends_nothing(
        self, app: FlowForge, direct: DirectDatabase, finish: str
    ) -> None:
        run_id = run_in(app, "running")
        assert app.transition_workflow_run(run_id, finish)
        row, events = app.get_workflow_run(run_id), direct.count_events()
        # A cancel that lost to the run's end is a lost race: False, never an error.
        assert app.cancel_workflow_run(run_id) is False
        assert app.get_workflow_run(run_id) == row
        assert direct.count_events() == events


# --- what the database itself enforces ---------------------------------------------------

#: The event log's primary key (originator_id, originator_version) refusing an event, as
#: each database words it.
EVENTS_KEY_REFUSED = r"flowforge_events_pkey|UNIQUE constraint failed: stored_events"

CONSTRAINT_VIOLATIONS = [
    pytest.param(
        "UPDATE task_runs SET state = 'running' WHERE id = %(id)s",
        "taskrun_lease_iff_running",
        "CHECK constraint failed: taskrun_lease_iff_running",
        id="running_row_without_lease",
    ),
    pytest.param(
        "UPDATE task_runs SET lease_expires_at = created_at WHERE id = %(id)s",
        "taskrun_lease_iff_running",
        "CHECK constraint failed: taskrun_lease_iff_running",
        id="ready_row_with_lease",
    ),
    pytest.param(
        "UPDATE task_runs SET fencing_token = -1 WHERE id = %(id)s",
        "task_runs_fencing_token_non_negative",
        "CHECK constraint failed: task_runs_fencing_token_non_negative",
        id="negative_fencing_token",
    ),
    pytest.param(
        "UPDATE task_runs SET attempt = 0 WHERE id = %(id)s",
        "task_runs_attempt_positive",
        "CHECK constraint failed: task_runs_attempt_positive",
        id="attempt_zero",
    ),
    pytest.param(
        "UPDATE task_runs SET state = 'paused' WHERE id = %(id)s",
        "task_runs_state_enum",
        "CHECK constraint failed: task_runs_state_enum",
        id="state_outside_enum",
    ),
    pytest.param(
        COPY_TASK_RUN,
        "task_runs_workflow_run_task_key_unique",
        "UNIQUE constraint failed: task_runs.workflow_run_id, task_runs.task_key",
        id="duplicate_run_and_task_key",
    ),
]


class TestDatabaseConstraints:
    """Writes the service never makes, made directly through the driver: the database
    refuses each one itself, whatever code wrote it."""

    @pytest.mark.parametrize(("statement", "constraint", "sqlite_message"), CONSTRAINT_VIOLATIONS)
    def test_the_database_refuses_a_row_that_breaks_a_constraint(
        self,
        app: FlowForge,
        direct: DirectDatabase,
        statement: str,
        constraint: str,
        sqlite_message: str,
    ) -> None:
        ready, _ = task_in(app, "ready")
        row = app.get_task_run(ready)
        with pytest.raises(direct.integrity_error) as info:
            direct.execute(statement, {"id": ready, "new_id": uuid4()})
        if direct.dialect == "postgres":
            assert isinstance(info.value, psycopg.Error)
            assert info.value.diag.constraint_name == constraint
        else:
            assert sqlite_message in str(info.value)
        assert app.get_task_run(ready) == row

    def test_the_same_direct_writes_succeed_when_they_break_no_constraint(
        self, app: FlowForge, direct: DirectDatabase
    ) -> None:
        # The control for the test above: the statements are sound, only the values fail.
        ready, _ = task_in(app, "ready")
        direct.execute("UPDATE task_runs SET attempt = 2 WHERE id = %(id)s", {"id": ready})
        assert app.get_task_run(ready).attempt == 2
        copy = uuid4()
        direct.execute(COPY_TASK_RUN_WITH_NEW_KEY, {"id": ready, "new_id": copy, "suffix": "_2"})
        assert app.get_task_run(copy).task_key == f"{ROOT}_2"

    @pytest.mark.parametrize("transition", ["claim", "cancel_ready"])
    def test_a_transition_whose_event_version_is_taken_raises_and_leaves_its_row_unchanged(
        self, app: FlowForge, direct: DirectDatabase, transition: str
    ) -> None:
        # The events' primary key is the second guard: with an event already at the
        # version the transition would record (another writer's, a tool's), the
        # transition fails whole. An event insert that skipped the conflict quietly would
        # commit the row (running, cancelled) with no event of its own. A claim goes in
        # one round trip with no BEGIN on PostgreSQL; a cancel_ready with BEGIN.
        ready, _ = task_in(app, "ready")
        row = app.get_task_run(ready)
        run = app.get_workflow_run(row.workflow_run_id)
        forge_event(app.store, ready, row.version + 1)
        events, dispatches, wakeups = direct.count_events(), app.dispatches_of(ready), marks(app)
        with pytest.raises(errors.PersistenceError, match=EVENTS_KEY_REFUSED):
            take_task_edge(app, transition, ready, 0)
        assert app.get_task_run(ready) == row  # same state, token, version
        assert app.get_workflow_run(run.id) == run  # a claim did not start the run either
        assert logged(app.store, ready) == [(1, TASK_CREATED_TOPIC), (2, FORGED_TOPIC)]
        assert direct.count_events() == events
        assert (app.dispatches_of(ready), marks(app)) == (dispatches, wakeups)


class TestRedispatch:
    """The safety net for a dispatch lost after its publish was confirmed."""

    def test_a_ready_task_whose_dispatch_was_delivered_long_ago_gets_a_new_one(
        self, app: FlowForge
    ) -> None:
        run_id = app.start_workflow_run({"name": "solo", "tasks": [{"key": "a", "type": "t"}]})
        (task,) = app.task_runs(run_id)
        assert app.redispatch_stalled(0) == []  # its first dispatch is still pending
        app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
        assert app.redispatch_stalled(3600) == []  # published recently: not stalled
        assert app.redispatch_stalled(0) == [task.id]
        (_first, second) = app.dispatches_of(task.id)
        assert second.published_at is None
        assert second.fencing_token == task.fencing_token
        assert app.redispatch_stalled(0) == []  # the new one is pending now

    def test_a_task_that_is_not_ready_is_never_redispatched(self, app: FlowForge) -> None:
        run_id = app.start_workflow_run({"name": "solo", "tasks": [{"key": "a", "type": "t"}]})
        (task,) = app.task_runs(run_id)
        app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
        assert app.claim_task_run(task.id, "w", 30) is not None
        assert app.redispatch_stalled(0) == []


class TestEachEdgesEventRecordsWhoAndWhat:
    """Every task edge's event carries the actor that took it, and a finish's event the
    result and error its row got: the audit log says what the row says."""

    def test_every_task_edge_records_its_actor_and_a_finish_its_result_and_error(
        self, app: FlowForge
    ) -> None:
        actor = "the-actor"
        # Values shaped like the transcoder's own encodings: the event's copy must be
        # escaped as the log's transcoder escapes it to read back exactly.
        look_alike = {"_type_": "datetime_iso", "_data_": "2026-01-01T00:00:00+00:00"}
        result, error = {"rows": [look_alike]}, {"type": "E", "message": "_type_"}
        _, tasks = start_run(app)
        other_run, others = start_run(app)
        root, child = tasks[ROOT].id, tasks[CHILD].id
        succeed, fail = TASK_RUN_MACHINE.get("succeed"), TASK_RUN_MACHINE.get("fail")
        with app.store.write() as writes:
            claimed = writes.tasks.claim(root, actor, LEASE_S)  # starts its run
            assert claimed is not None
            _, failed = writes.tasks.finish_trying_run(
                root,
                fail,
                claimed.fencing_token,
                try_run=False,
                actor=actor,
                result={"partial": [1]},
                error=error,
            )
            assert failed is not None and (failed.result, failed.error) == (
                {"partial": [1]},
                error,
            )
            retry = TASK_RUN_MACHINE.get("schedule_retry")
            assert writes.tasks.take_edge(retry, root, actor=actor)
            assert writes.tasks.take_edge(TASK_RUN_MACHINE.get("retry_ready"), root, actor=actor)
            (claimed,), _ = writes.tasks.claims_with_runs([root], actor, [])
            assert claimed is not None
            token = claimed.fencing_token
            assert writes.tasks.renew_lease(root, token, LEASE_S, actor=actor)
            _, done = writes.tasks.finish_trying_run(
                root, succeed, token, try_run=True, actor=actor, result=result
            )
            assert done is not None and done.result == result
            satisfied = TASK_RUN_MACHINE.get("dependencies_satisfied")
            assert writes.tasks.take_edge(satisfied, child, actor=actor)
            claimed = writes.tasks.claim(child, actor, LEASE_S)
            assert claimed is not None
            assert writes.tasks.finish(
                child,
                TASK_RUN_MACHINE.get("cancel_running"),
                claimed.fencing_token,
                actor=actor,
                result=result,
                error=error,
            )
            (other,), _ = writes.tasks.claims_with_runs([others[ROOT].id], actor, [])
            assert other is not None  # starts the other run
        entries = [e for e in app.history(root) + app.history(child) if e.transition != "create"]
        assert {e.actor for e in entries} == {actor}, [(e.transition, e.actor) for e in entries]
        by_edge = {e.transition: e for e in entries}
        assert (by_edge["fail"].result, by_edge["fail"].error) == ({"partial": [1]}, error)
        assert by_edge["succeed"].result == result
        assert (by_edge["cancel_running"].result, by_edge["cancel_running"].error) == (
            result,
            error,
        )
        assert app.get_task_run(root).result == result
        for run_id in (tasks[ROOT].workflow_run_id, other_run):
            (start,) = [e for e in run_entries(app, run_id) if e.transition == "start"]
            assert start.actor == actor  # a claim started the run
