"""The commands that change a run or a task run.

Every command follows the one rule (docs/architecture.md): legality first, decided by the
pure core before any I/O; then one transaction holding the conditional write on the
current-state row, the event at the row's new version, and the outbox row when a task
became ready. A lost race or a stale fencing token returns ``False`` (or ``None``) and
appends nothing; it never raises.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from flowforge import errors
from flowforge.aggregates import json_values
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import WorkflowRunState
from flowforge.aggregates.task_run import (
    ACTOR_REAPER,
    ACTOR_SCHEDULER,
    ACTOR_USER,
    finish_rule,
    transition_rule,
)
from flowforge.app import advance
from flowforge.app.definition_files import load_definition
from flowforge.app.queries import Queries
from flowforge.app.results import AdvanceResult, Claim, StartedRun

log = logging.getLogger(__name__)


class Commands(Queries):
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
        delay = non_negative(retry_delay_seconds, "retry_delay_seconds")
        with self._writer() as writer:
            row = writer.take_task_edge(edge, task_run_id, actor=actor, delay_seconds=delay)
        return row is not None

    def claim_task_run(
        self, task_run_id: UUID, worker_id: str, lease_seconds: float
    ) -> Claim | None:
        """READY to RUNNING with a new fencing token and a lease set by the database's
        clock; the claim, or None when another worker got there first."""
        seconds = positive(lease_seconds, "lease_seconds")
        with self._writer() as writer:
            row = writer.claim(task_run_id, worker_id, seconds)
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
        # Only a success stores a result and only a failure an error; both are user
        # JSON, checked before the transaction opens.
        succeeded, failed = edge.name == "succeed", edge.name == "fail"
        stored_result = json_values.checked_json(result, "result") if succeeded else None
        stored_error = json_values.error_details(error or {}) if failed else None
        with self._writer() as writer:
            row = writer.finish(
                edge,
                task_run_id,
                fencing_token,
                actor=actor or "worker",
                result=stored_result,
                error=stored_error,
            )
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
        seconds = positive(lease_seconds, "lease_seconds")
        with self._writer() as writer:
            row = writer.renew_lease(task_run_id, fencing_token, seconds, actor=actor or "worker")
        return row is not None

    def reclaim_task_run(self, task_run_id: UUID) -> bool:
        """The reaper's edge: RUNNING with an expired lease back to READY, token + 1."""
        with self._writer() as writer:
            row = writer.reclaim(task_run_id, actor=ACTOR_REAPER)
        return row is not None

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float = 0.0, *, actor: str = ACTOR_SCHEDULER
    ) -> bool:
        return self.transition_task_run(
            task_run_id, "schedule_retry", actor=actor, retry_delay_seconds=delay_seconds
        )

    def retry_ready(self, task_run_id: UUID, *, actor: str = ACTOR_SCHEDULER) -> bool:
        return self.transition_task_run(task_run_id, "retry_ready", actor=actor)


# --- argument checks: bad input is a clear error, before any I/O -------------------------


def positive(value: float, name: str) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def non_negative(value: float, name: str) -> float:
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)
