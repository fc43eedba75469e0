"""The application service: every command that changes state, and the queries.

Every command follows the one rule (docs/architecture.md): legality first, decided by the
pure core before any I/O; then one transaction holding the conditional write on the
current-state row, the event at the row's new version, and the outbox row when a task
became ready. A lost race or a stale fencing token returns ``False`` (or ``None``) and
appends nothing; it never raises.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Transcoder

from flowforge import errors
from flowforge.aggregates import json_values
from flowforge.aggregates.definition import WorkflowDefinition, load_definition
from flowforge.aggregates.machines import REAPER_TRANSITION, TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import WorkflowRunState
from flowforge.aggregates.task_run import (
    ACTOR_REAPER,
    ACTOR_SCHEDULER,
    ACTOR_USER,
    TaskRun,
    finish_rule,
    transition_rule,
)
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app import advance, audit, dispatch
from flowforge.app.infrastructure import (
    make_database,
    parse_database_url,
    schema_creation_lock,
)
from flowforge.app.results import (
    AdvanceResult,
    AuditEntry,
    Claim,
    RebuildReport,
    ScheduleSummary,
    StartedRun,
)
from flowforge.app.transcoder import UserSafeJSONTranscoder
from flowforge.app.writer import Writer
from flowforge.processes.transport import DispatchPublisher
from flowforge.projections import projector, schema
from flowforge.projections.database import Transaction, translate_errors
from flowforge.projections.tables import OutboxRow, TaskRunRow, WorkflowRunRow

log = logging.getLogger(__name__)

#: How many expired leases (or stalled ready tasks) one pass handles at most.
REAP_BATCH = 500
#: A ready task undispatched for this long gets a new dispatch (see redispatch_stalled).
REDISPATCH_AFTER_S = 300.0


class _EventStore(Application[UUID]):
    """The ``eventsourcing`` application that owns the event log (mapper, recorder,
    repository, notification log). FlowForge never calls its ``save``: every append
    goes through :class:`FlowForge`'s transactions."""

    # The PostgreSQL recorder names its table after the application: flowforge_events.
    name = "FlowForge"

    def construct_transcoder(self) -> Transcoder:
        transcoder = UserSafeJSONTranscoder()
        self.register_transcodings(transcoder)
        return transcoder


class FlowForge:
    """FlowForge's application service, configured by a database URL."""

    def __init__(self, database_url: str) -> None:
        location = parse_database_url(database_url)
        with schema_creation_lock(location):
            with translate_errors(location.display):
                self.events = _EventStore(env=location.eventsourcing_env())
            self.database = make_database(
                self.events.recorder.datastore,  # type: ignore[attr-defined]
                location,
            )
            self.schema_version = schema.ensure_schema(self.database)
        #: The deployment this database is (see ``flowforge.config.DEPLOYMENT_TOPOLOGY``).
        self.deployment_id = schema.deployment_id(self.database)

    def close(self) -> None:
        self.events.close()

    def __enter__(self) -> FlowForge:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def _writer(self) -> Iterator[Writer]:
        tx: Transaction
        with self.database.transaction() as tx:
            yield Writer(tx, self.events.mapper)

    # --- workflow runs -------------------------------------------------------------------

    def start_workflow_run(
        self,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str = ACTOR_USER,
    ) -> UUID:
        """Create a run and its task runs in one transaction; the run's id.

        With an ``idempotency_key`` that a run already has, returns that run's id and
        creates nothing.
        """
        return self.submit_workflow_run(
            definition, inputs, idempotency_key=idempotency_key, actor=actor
        ).run_id

    def submit_workflow_run(
        self,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str = ACTOR_USER,
    ) -> StartedRun:
        """Like :meth:`start_workflow_run`, also saying whether the run is new."""
        checked = load_definition(definition)
        run_inputs = json_values.checked_json(dict(inputs or {}), "inputs")
        with self._writer() as writer:
            run_id, created = writer.create_run(
                checked, run_inputs, idempotency_key=idempotency_key, actor=actor
            )
        log.info(
            "workflow run submitted",
            extra={"workflow_run_id": str(run_id), "run_created": created},
        )
        return StartedRun(run_id, created)

    def transition_workflow_run(
        self, run_id: UUID, transition: str, *, actor: str = ACTOR_USER
    ) -> bool:
        edge = WORKFLOW_RUN_MACHINE.get(transition)
        with self._writer() as writer:
            return writer.take_run_edge(edge, run_id, actor=actor) is not None

    def cancel_workflow_run(self, run_id: UUID, *, actor: str = ACTOR_USER) -> bool:
        """Cancel a pending or running run, then its tasks; False if it finished first.

        ``RunAlreadyFinishedError`` for a run that is already terminal.
        """
        run = self.get_workflow_run(run_id)
        if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
            raise errors.RunAlreadyFinishedError(
                f"workflow run {run_id} already {run.state}; a finished run never "
                f"changes again, so there is nothing to cancel"
            )
        name = "cancel_before_start" if run.run_state is WorkflowRunState.PENDING else "cancel"
        cancelled = self.transition_workflow_run(run_id, name, actor=actor)
        if cancelled:
            self.advance_workflow_run(run_id)
        return cancelled

    def advance_workflow_run(
        self, run_id: UUID, *, rand: Callable[[], float] = random.random
    ) -> AdvanceResult:
        """One run's scheduling work in one transaction (see ``flowforge.app.advance``)."""
        with self._writer() as writer:
            return advance.advance(writer, run_id, rand)

    def schedule_once(
        self,
        *,
        redispatch_after: float = REDISPATCH_AFTER_S,
        covers: Callable[[UUID], bool] | None = None,
    ) -> ScheduleSummary:
        """One scheduler pass: reap expired leases, advance every active run (only those
        ``covers`` accepts, if given), and redispatch ready tasks whose dispatch was lost
        (see :meth:`redispatch_stalled`)."""
        summary = ScheduleSummary(reaped=len(self.reap_expired_leases()))
        for run_id in self._query_ids("select_runs_to_advance", {}):
            if covers is None or covers(run_id):
                summary.add(self.advance_workflow_run(run_id))
        summary.redispatched = len(self.redispatch_stalled(redispatch_after))
        return summary

    # --- task runs -----------------------------------------------------------------------

    def transition_task_run(
        self,
        task_run_id: UUID,
        transition: str,
        *,
        actor: str = ACTOR_USER,
        retry_delay_seconds: float = 0.0,
        worker_id: str | None = None,
        lease_seconds: float | None = None,
    ) -> bool:
        """Take an edge that needs no lease. ``IllegalTransitionError`` for a name not
        in the table, ``LeaseRequiredError`` for succeed/fail/cancel_running (use
        :meth:`finish_task_run`), ``ReaperOnlyTransitionError`` for reap_lease."""
        edge = transition_rule(transition)
        if edge.name == "claim":
            if worker_id is None or lease_seconds is None:
                raise errors.IllegalTransitionError(
                    "TaskRun", "claim", "pass worker_id and lease_seconds, or call claim_task_run"
                )
            return self.claim_task_run(task_run_id, worker_id, lease_seconds) is not None
        params = {"delay_seconds": _non_negative(retry_delay_seconds, "retry_delay_seconds")}
        with self._writer() as writer:
            return writer.take_task_edge(edge, task_run_id, actor=actor, **params) is not None

    def claim_task_run(
        self, task_run_id: UUID, worker_id: str, lease_seconds: float
    ) -> Claim | None:
        """READY to RUNNING with a new fencing token and a lease set by the database's
        clock; the claim, or None when another worker got there first."""
        edge = TASK_RUN_MACHINE.get("claim")
        params = {
            "worker_id": worker_id,
            "lease_seconds": _positive(lease_seconds, "lease_seconds"),
        }
        with self._writer() as writer:
            row = writer.take_task_edge(edge, task_run_id, actor=worker_id, **params)
        if row is None:
            return None
        assert row.lease_expires_at is not None
        return Claim(row.id, row.fencing_token, row.attempt, row.lease_expires_at)

    def finish_task_run(
        self,
        task_run_id: UUID,
        fencing_token: int,
        outcome: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
        *,
        actor: str | None = None,
    ) -> bool:
        """succeed / fail / cancel_running, only while the row is running with this
        fencing token: a stale token writes nothing and returns False."""
        edge = finish_rule(outcome)
        params = {
            "fencing_token": fencing_token,
            "result": json_values.checked_json(result, "result")
            if edge.name == "succeed"
            else None,
            "error": json_values.error_details(error or {}) if edge.name == "fail" else None,
        }
        with self._writer() as writer:
            row = writer.take_task_edge(edge, task_run_id, actor=actor or "worker", **params)
        return row is not None

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str | None = None,
    ) -> bool:
        """Extend the lease from the database's now, only while the token is current."""
        seconds = _positive(lease_seconds, "lease_seconds")
        with self._writer() as writer:
            row = writer.renew_lease(task_run_id, fencing_token, seconds, actor=actor or "worker")
        return row is not None

    def reclaim_task_run(self, task_run_id: UUID) -> bool:
        """The reaper's edge: RUNNING with an expired lease back to READY, token + 1."""
        with self._writer() as writer:
            row = writer.take_task_edge(REAPER_TRANSITION, task_run_id, actor=ACTOR_REAPER)
        return row is not None

    def reap_expired_leases(self) -> list[UUID]:
        """Reclaim every task whose lease expired by the database's clock."""
        candidates = self._query_ids("select_expired_leases", {"limit": REAP_BATCH})
        return [task_run_id for task_run_id in candidates if self.reclaim_task_run(task_run_id)]

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float = 0.0, *, actor: str = ACTOR_SCHEDULER
    ) -> bool:
        return self.transition_task_run(
            task_run_id, "schedule_retry", actor=actor, retry_delay_seconds=delay_seconds
        )

    def retry_ready(self, task_run_id: UUID, *, actor: str = ACTOR_SCHEDULER) -> bool:
        return self.transition_task_run(task_run_id, "retry_ready", actor=actor)

    # --- the outbox ----------------------------------------------------------------------

    def publish_pending_dispatches(
        self,
        publisher: DispatchPublisher,
        limit: int = 500,
        *,
        task_types: Collection[str] | None = None,
    ) -> int:
        """Publish up to ``limit`` pending outbox rows (only of ``task_types``, if given);
        how many were delivered.

        One transaction selects the rows (``FOR UPDATE SKIP LOCKED``: parallel publishers
        divide them), publishes them with confirms, and marks them delivered only after
        the broker's ack. If the publish raises, the transaction rolls back and every
        row stays pending for the next sweep.
        """
        params: dict[str, Any] = {"limit": limit}
        statement = "select_pending_outbox"
        if task_types is not None:
            params["task_types"] = sorted(task_types)
            statement = "select_pending_outbox_of_types"
        with self._writer() as writer:
            rows = [OutboxRow.from_mapping(r) for r in writer.tx.run(statement, params)]
            if not rows:
                return 0
            publisher.publish([dispatch.message_for(row, self.deployment_id) for row in rows])
            for row in rows:
                writer.tx.run("mark_outbox_published", {"dispatch_id": row.dispatch_id})
        return len(rows)

    def redispatch_stalled(self, older_than_seconds: float) -> list[UUID]:
        """A new dispatch for every task READY for over ``older_than_seconds`` with no
        dispatch pending or published within that time.

        The safety net for a dispatch that was lost after its publish was confirmed: one
        dead-lettered past the queue's delivery limit, or one held in memory by an
        embedded process that exited. A dispatch that was only slow is duplicated, which
        the claim makes harmless.
        """
        older_than = _non_negative(older_than_seconds, "older_than_seconds")
        with self._writer() as writer:
            at = writer.now()
            params = {"older_than": older_than, "limit": REAP_BATCH}
            rows = [
                TaskRunRow.from_mapping(r) for r in writer.tx.run("select_stalled_ready", params)
            ]
            for row in rows:
                writer.enqueue_dispatch(
                    row.id, row.task_key, row.task_type, row.fencing_token, at=at
                )
        if rows:
            log.warning("stalled ready tasks redispatched", extra={"count": len(rows)})
        return [row.id for row in rows]

    def pending_dispatch_count(self) -> int:
        (row,) = self._query("count_pending_outbox", {})
        return int(row["pending"])

    # --- queries (the projected tables, never the log) -----------------------------------

    def get_workflow_run(self, run_id: UUID) -> WorkflowRunRow:
        rows = self._query("select_workflow_run", {"id": run_id})
        if not rows:
            raise errors.UnknownRunError(
                f"no workflow run {run_id}; list runs with `flowforge runs`"
            )
        return WorkflowRunRow.from_mapping(rows[0])

    def get_task_run(self, task_run_id: UUID) -> TaskRunRow:
        rows = self._query("select_task_run", {"id": task_run_id})
        if not rows:
            raise errors.UnknownTaskRunError(
                f"no task run {task_run_id}; list a run's tasks with `flowforge status RUN`"
            )
        return TaskRunRow.from_mapping(rows[0])

    def task_runs(self, run_id: UUID) -> list[TaskRunRow]:
        rows = self._query("select_task_runs_of_run", {"workflow_run_id": run_id})
        return [TaskRunRow.from_mapping(r) for r in rows]

    def recent_runs(self, limit: int = 20) -> list[WorkflowRunRow]:
        return [
            WorkflowRunRow.from_mapping(r)
            for r in self._query("select_recent_runs", {"limit": limit})
        ]

    def ready_task_runs(self, limit: int = 100) -> list[TaskRunRow]:
        return [
            TaskRunRow.from_mapping(r)
            for r in self._query("select_ready_task_runs", {"limit": limit})
        ]

    def expired_leases(self, limit: int = REAP_BATCH) -> list[UUID]:
        return self._query_ids("select_expired_leases", {"limit": limit})

    def dispatches_of(self, task_run_id: UUID) -> list[OutboxRow]:
        rows = self._query("select_outbox_of_task_run", {"task_run_id": task_run_id})
        return [OutboxRow.from_mapping(r) for r in rows]

    def database_now(self) -> datetime:
        """The database's clock: the one that decides leases and retry times."""
        (row,) = self._query("db_now", {})
        value: datetime = row["db_now"]
        return value

    def _query(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        tx: Transaction
        with self.database.read() as tx:
            return tx.run(name, params)

    def _query_ids(self, name: str, params: Mapping[str, Any]) -> list[UUID]:
        return [next(iter(row.values())) for row in self._query(name, params)]

    # --- the audit log and the rebuild ---------------------------------------------------

    def task_run_aggregate(self, task_run_id: UUID) -> TaskRun:
        """The TaskRun reconstituted from its events alone."""
        aggregate: TaskRun = self.events.repository.get(task_run_id)
        return aggregate

    def workflow_run_aggregate(self, run_id: UUID) -> WorkflowRun:
        aggregate: WorkflowRun = self.events.repository.get(run_id)
        return aggregate

    def history(self, task_run_id: UUID) -> list[AuditEntry]:
        """Every transition of one task run, every attempt, in order."""
        return audit.entries(self.events, [task_run_id])

    def run_history(self, run_id: UUID) -> list[AuditEntry]:
        """The audit log of a run: its own transitions and every task's, in time order."""
        self.get_workflow_run(run_id)
        task_ids = [t.id for t in self.task_runs(run_id)]
        return audit.entries(self.events, [run_id, *task_ids])

    def rebuild_projections(self) -> RebuildReport:
        """Delete the projected rows and rebuild them from the log, in one transaction.

        Uses the same apply function as the write path; writers wait on the tables'
        lock meanwhile, so the rebuilt rows are exactly the log's. The outbox is not a
        projection (it is delivery state) and is kept.
        """
        with self._writer() as writer:
            tx = writer.tx
            tx.run("lock_projected_tables")
            stored = projector.read_stored_events(tx)
            tx.run("delete_task_runs")
            tx.run("delete_workflow_runs")
            for record in stored:
                projector.apply_event(tx, self.events.mapper.to_domain_event(record))
        runs = sum(1 for s in stored if s.topic.endswith("WorkflowRun.Created"))
        tasks = sum(1 for s in stored if s.topic.endswith("TaskRun.Created"))
        return RebuildReport(events=len(stored), workflow_runs=runs, task_runs=tasks)


# --- argument checks: bad input is a clear error, before any I/O -------------------------


def _positive(value: float, name: str) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def _non_negative(value: float, name: str) -> float:
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)
