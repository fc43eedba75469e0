"""The seam to the ``eventsourcing`` library: its own reader reads what FlowForge wrote.

FlowForge appends events with its own SQL (a transition's event built by the statement
itself on PostgreSQL, the mapper's bytes inserted by FlowForge's statement on SQLite),
assuming the library's stored form (``flowforge/projections/event_log.py``). Here a
small workflow runs through the service: a limit change, claims (limited), a lease
renewal, a failure, its retry, successes, a leaf's success that settles its run, a
user's cancel. Then a plain library ``Application`` (the library's own factory, mapper
and default transcoder; none of FlowForge's code) is opened on the same database and
table, and:

- its recorder's ``select_events`` gives every aggregate's events, versions 1..n, and
  its ``select_notifications`` gives exactly those events;
- its ``repository.get`` rebuilds each aggregate, equal to what FlowForge's projected
  rows say (state, version, fencing token, attempt; a limit's value).

A library upgrade that changes the table, the columns, the topic or the state's encoding
fails here. One base class, subclassed per backend (STYLE.md item 8).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import ApplicationRecorder

from flowforge import Finish
from flowforge.aggregates import task_run, task_type_limit, workflow_run
from flowforge.app.service import FlowForge
from flowforge.projections import event_log
from flowforge.projections.db.location import parse_database_url
from tests.conftest import empty_postgres
from tests.helpers import claim, states, task_id, wait_until

LEASE_S = 30.0
#: Two tasks, the second a leaf, of a limited type; a failure retries at once.
DEFINITION: dict[str, Any] = {
    "name": "library_contract",
    "tasks": [
        {"key": "first", "type": "limited"},
        {"key": "leaf", "type": "limited", "depends_on": ["first"]},
    ],
    "retry": {"max_attempts": 2, "backoff_seconds": 0.0, "jitter": 0.0},
}
RESULT = {"rows": 3, "names": ["a", "b"], "nested": {"ok": True, "ratio": 0.5}}
ERROR = {"type": "KeyError", "message": "'id'"}


class LibraryReader(Application[UUID]):
    """The library's own application on FlowForge's table: only its name, which names
    the PostgreSQL table, is FlowForge's."""

    name = event_log.APPLICATION_NAME


def _library_env(url: str) -> dict[str, str]:
    """The library's settings for ``url``, with the library's own PostgreSQL factory in
    place of FlowForge's subclass (which only adds connection settings)."""
    env = parse_database_url(url).eventsourcing_env(create_tables=False)
    if env["PERSISTENCE_MODULE"] != "eventsourcing.sqlite":
        env["PERSISTENCE_MODULE"] = "eventsourcing.postgres"
    return env


def _run_a_small_workflow(app: FlowForge) -> tuple[UUID, UUID]:
    """The workflow of the module's docstring; the run that succeeded and the one a user
    cancelled."""
    assert app.set_task_type_limit("limited", 2, actor="user:ops")
    assert app.set_task_type_limit("limited", 3, actor="user:ops")
    run_id = app.start_workflow_run(DEFINITION, {"n": 1})
    app.schedule_once()
    first = claim(app, task_id(app, run_id, "first"), "w1", LEASE_S)
    assert app.renew_lease(first.task_run_id, first.fencing_token, LEASE_S)
    assert app.finish_task_run(first.task_run_id, first.fencing_token, "fail", error=ERROR)
    wait_until(lambda: _ready_after_a_pass(app, run_id, "first"), 5.0, "the retry to be ready")
    first = claim(app, first.task_run_id, "w2", LEASE_S)
    assert app.finish_task_run(first.task_run_id, first.fencing_token, "succeed", result=RESULT)
    app.schedule_once()
    leaf = claim(app, task_id(app, run_id, "leaf"), "w1", LEASE_S)
    # A leaf's success: on PostgreSQL its run's completion goes in SQL with it.
    assert app.finish_task_runs([Finish(leaf.task_run_id, leaf.fencing_token, "succeed", 7)])
    assert states(app, run_id) == {"first": "succeeded", "leaf": "succeeded"}
    cancelled = app.start_workflow_run(DEFINITION, {"n": 2})
    assert app.cancel_workflow_run(cancelled, actor="user:ops")
    return run_id, cancelled


def _ready_after_a_pass(app: FlowForge, run_id: UUID, key: str) -> bool | None:
    app.schedule_once()
    return states(app, run_id)[key] == "ready" or None


class LibraryContract:
    """The library's recorder and repository read every event FlowForge wrote."""

    @pytest.fixture
    def app(self) -> FlowForge:
        raise NotImplementedError  # each backend's subclass opens its own

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def reader(self, app: FlowForge, url: str) -> Iterator[LibraryReader]:
        self.runs = _run_a_small_workflow(app)
        library = LibraryReader(env=_library_env(url))
        yield library
        library.close()

    def _aggregate_ids(self, app: FlowForge) -> list[UUID]:
        ids = [task_type_limit.limit_id("limited")]
        for run_id in self.runs:
            ids += [run_id, *(task.id for task in app.task_runs(run_id))]
        return ids

    def test_the_library_reads_its_own_table(self, app: FlowForge, reader: LibraryReader) -> None:
        recorder = reader.recorder
        assert (
            getattr(recorder, "events_table_name", None)
            == event_log.EVENT_TABLES[app.database.dialect]
        )

    def test_the_recorder_selects_every_event_in_version_order(
        self, app: FlowForge, reader: LibraryReader
    ) -> None:
        stored = {}
        for aggregate_id in self._aggregate_ids(app):
            events = reader.recorder.select_events(aggregate_id)
            versions = [event.originator_version for event in events]
            assert versions == list(range(1, len(versions) + 1)), aggregate_id
            for event in events:
                domain_event = reader.mapper.to_domain_event(event)
                assert domain_event.originator_id == aggregate_id
                assert event.topic == event_log.topic_of(type(domain_event))
                stored[aggregate_id, event.originator_version] = event.topic
        # Every kind of edge the workflow took is among them (a retry, a renewal, ...).
        kinds = {topic.rsplit(".", 1)[-1] for topic in stored.values()}
        assert {"Claimed", "LeaseRenewed", "Failed", "RetryScheduled", "Succeeded"} <= kinds
        assert {"Created", "Changed", "CancelledBeforeStart"} <= kinds
        recorder = reader.recorder
        assert isinstance(recorder, ApplicationRecorder)
        notifications = recorder.select_notifications(start=1, limit=10_000)
        logged = {(n.originator_id, n.originator_version): n.topic for n in notifications}
        assert logged == stored

    def test_the_repository_rebuilds_what_the_rows_say(
        self, app: FlowForge, reader: LibraryReader
    ) -> None:
        for run_id in self.runs:
            run: object = reader.repository.get(run_id)
            assert isinstance(run, workflow_run.WorkflowRun)
            with app.store.read() as reads:
                run_row = reads.workflow_run(run_id)
                task_rows = reads.task_runs_of(run_id)
            assert run_row is not None and task_rows
            assert (run.state, run.version) == (run_row.state, run_row.version)
            assert run.state in {"succeeded", "cancelled"}
            for row in task_rows:
                task: object = reader.repository.get(row.id)
                assert isinstance(task, task_run.TaskRun)
                rebuilt = (task.state, task.version, task.fencing_token, task.attempt)
                assert rebuilt == (row.state, row.version, row.fencing_token, row.attempt)
                assert (task.result, task.error) == (row.result, row.error)
        limit: object = reader.repository.get(task_type_limit.limit_id("limited"))
        assert isinstance(limit, task_type_limit.TaskTypeLimit)
        (view,) = app.task_type_limits()
        assert (limit.max_running, limit.version) == (view.max_running, 2)


class TestPostgresLibraryContract(LibraryContract):
    @pytest.fixture
    def url(self, postgres_url: str) -> str:
        return postgres_url

    @pytest.fixture
    def app(self, postgres_url: str) -> Iterator[FlowForge]:
        empty_postgres(postgres_url)
        with FlowForge(postgres_url) as app:
            yield app


class TestSqliteLibraryContract(LibraryContract):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url

    @pytest.fixture
    def app(self, sqlite_app: FlowForge) -> FlowForge:
        return sqlite_app
