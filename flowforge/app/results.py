"""What the application service's commands return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.projections.tables import TaskRunRow


@dataclass(frozen=True, slots=True)
class Claim:
    """A won claim: the fencing token every later write of this attempt must carry."""

    task_run_id: UUID
    fencing_token: int
    attempt: int
    lease_expires_at: datetime

    @classmethod
    def of(cls, row: TaskRunRow) -> Claim:
        """The claim a claimed (running) row records."""
        assert row.lease_expires_at is not None
        return cls(row.id, row.fencing_token, row.attempt, row.lease_expires_at)


@dataclass(frozen=True, slots=True)
class StartedRun:
    run_id: UUID
    #: False when a run with the same idempotency key already existed (nothing appended).
    created: bool


@dataclass(slots=True)
class AdvanceResult:
    """What one ``advance_workflow_run`` changed."""

    run_id: UUID
    started: bool = False
    promoted: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    made_ready: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished_as: str | None = None
    #: A delayed run left pending: its start time has not come (the database's clock).
    waiting_to_start: bool = False


@dataclass(slots=True)
class ScheduleSummary:
    """What one ``schedule_once`` pass changed."""

    reaped: int = 0
    timed_out: int = 0
    promoted: int = 0
    retried: int = 0
    runs_advanced: int = 0
    runs_finished: int = 0
    cancelled: int = 0
    redispatched: int = 0
    #: Delayed runs advanced before their start time (a new one: a new timer).
    waiting_to_start: int = 0
    #: Runs started by cron schedules (``app/schedules.py``).
    fired: int = 0

    def add(self, result: AdvanceResult) -> None:
        self.runs_advanced += 1
        self.waiting_to_start += result.waiting_to_start
        self.promoted += len(result.promoted)
        self.retried += len(result.retried)
        self.cancelled += len(result.cancelled)
        self.runs_finished += result.finished_as is not None


@dataclass(frozen=True, slots=True)
class FiredRun:
    """One fire of a cron schedule: its nominal fire time and the run it created."""

    schedule: str
    fire_at: datetime
    run_id: UUID


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One transition in the audit log, as an operator reads it."""

    at: datetime
    aggregate: str
    aggregate_id: UUID
    version: int
    event: str
    transition: str
    source: str | None
    target: str
    actor: str
    task_key: str | None = None
    attempt: int | None = None
    fencing_token: int | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    retry_due_at: datetime | None = None
    result: Any = None
    error: dict[str, str] | None = None
    #: A run's creation: the run it reruns.
    rerun_of: UUID | None = None
    #: A run's creation: a delayed run's start time.
    start_at: datetime | None = None
    #: A ``carry_over``: where the result was produced (run, task run, attempt).
    carried_from_run_id: UUID | None = None
    carried_from_task_run_id: UUID | None = None
    carried_from_attempt: int | None = None


@dataclass(frozen=True, slots=True)
class RebuildReport:
    events: int
    workflow_runs: int
    task_runs: int
