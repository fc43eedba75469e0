"""Concurrency limits' writes: a limited task's claim, the slots a finish frees, the
held dispatches a freed slot sends again, and an operator's change of a limit.

Every step is a conditional write on a counter row (``task_type_limits``,
``run_limits``; the statements and the race argument are in ``sql/limits.sql`` and
docs/scheduling/limits.md). A task without a limit never comes here on its claim: its
claim is ``task_claim``, which matches only a task with no counter row. What every
edge that leaves ``running`` adds (:meth:`LimitWrites.free`) is sent with the
transaction's next statement or its COMMIT: no round trip of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge.aggregates import task_type_limit
from flowforge.aggregates.ids import new_id
from flowforge.projections.db.protocols import Row
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes.edges import CLAIM, RUNNING, START_RUN
from flowforge.projections.writes.outbox import OutboxWrites
from flowforge.projections.writes.recording import EventRecipe, Recording, Statement

#: Set once this process has met a concurrency limit (a limited claim, or a change of a
#: limit): from then on its finishes wake the publishers (:meth:`LimitWrites.free`).
LIMITS_MET = threading.Event()
#: Where each statement of :meth:`LimitWrites.claim` is (keep in step with its list).
_RUN_SLOT, _TYPE_SLOT, _CLAIM, _START, _HOLD = 2, 3, 4, 5, 8


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a limited claim was refused: the limit (``"type"`` or ``"run"``), its value,
    and how many held its slots when the claim looked."""

    held_by: str
    limit: int
    running: int


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """A limited claim's outcome: the claimed row, or ``None`` and, if a limit refused
    it (the task stays ready, its dispatch held), why."""

    row: TaskRunRow | None
    refusal: Refusal | None = None


class LimitWrites:
    """The limits' part of one write transaction."""

    def __init__(self, recording: Recording, outbox: OutboxWrites) -> None:
        self._recording = recording
        self._tx = recording.tx
        self._outbox = outbox

    def claim(
        self, task_run_id: UUID, worker_id: str, lease_seconds: float | None
    ) -> LimitedClaim:
        """A limited task's claim, all in ONE round trip (its own transaction: nothing
        may precede it). The task's row locked first (task rows before counter rows:
        every writer's lock order), then the run's slot, then the type's, each taken
        only if there is room; the claim only if every slot it needs was taken; a slot
        taken for a claim that lost is given back; a refused claim holds its dispatch."""
        LIMITS_MET.set()
        claim = EventRecipe.of_task(CLAIM, worker_id)
        start = EventRecipe.of_run(START_RUN, worker_id)
        own = {"id": task_run_id, "claim": new_id().hex}
        claim_params = {
            **own,
            "source": CLAIM.source.value,
            "target": CLAIM.target.value,
            "worker_id": worker_id,
            "lease_seconds": lease_seconds,
        }
        start_params = {
            "task_run_id": task_run_id,
            "source": START_RUN.source.value,
            "target": START_RUN.target.value,
            "claimed": RUNNING,
        }
        statements: list[Statement] = [
            ("lock_task_runs_for_claim", {}),
            ("lock_ready_task_for_claim", own),
            ("take_run_slot", own),
            ("take_type_slot", own),
            self._recording.statement("task_claim_limited", claim_params, claim),
            self._recording.statement("run_start_after_claim", start_params, start),
            ("return_run_slot", own),
            ("return_type_slot", own),
            ("hold_dispatch", own),
            ("unhold_claimed", own),
            ("clear_run_claim_mark", own),
            ("clear_type_claim_mark", own),
        ]
        unread = self._recording.unread_where_stored([_START])
        rows = self._tx.run_each(statements, commit=self._recording.commits(True), unread=unread)
        row = self._recording.recorded(TaskRunRow, rows[_CLAIM], claim)
        self._recording.recorded(WorkflowRunRow, rows[_START], start)
        if row is not None or not rows[_HOLD]:
            return LimitedClaim(row)
        held_by = rows[_HOLD][0]["held_by"]
        slot = rows[_RUN_SLOT] if held_by == "run" else rows[_TYPE_SLOT]
        return LimitedClaim(None, _refusal(held_by, slot))

    def free(self, row: TaskRunRow) -> None:
        """The slots of a task that just left ``running`` here, freed, and the oldest
        task each freed limit holds dispatched again: sent with this transaction's next
        statement (a task with no limit matches no counter row and no hold)."""
        frees = free_statements(row.id, row.task_type, row.workflow_run_id)
        if self._recording.events_in_sql:
            frees = frees[-1:]  # the edge's own statement freed the slots (postgres.sql)
        for name, params in frees:
            self._tx.defer(name, params)
        # A release's rows are not read (deferred): wake the publishers when a slot may
        # have been freed, i.e. when this process has met a limit. Otherwise (a task with
        # no limit, the hot path) no wake-up is paid for; a dispatch released by a
        # process that never met a limit (a scheduler's reap) waits for the publishers'
        # poll (0.2 s by default).
        if row.max_running is not None or LIMITS_MET.is_set():
            self._outbox.enqueued = True

    def drop_hold(self, task_run_id: UUID) -> None:
        """The held dispatch of a task cancelled while ready, if a limit held it: sent
        with this transaction's next statement (a PK probe; no round trip of its own)."""
        self._tx.defer("drop_hold", {"task_run_id": task_run_id})

    def change(self, task_type: str, max_running: int | None, *, at: datetime, actor: str) -> bool:
        """An operator's limit on ``task_type`` set (``max_running``) or removed
        (``None``), with its event; False if another change won the race, or for a
        removal of a limit that is not set. A raised or removed limit dispatches again
        as many held tasks as it made room for. ``TransactionConflictError`` if the
        lock on ``task_runs`` was not granted within its bounded wait (nothing written)."""
        LIMITS_MET.set()
        # A bounded wait for the lock (TransactionConflictError past it: the caller
        # tries again), sent with the lock and the read: one round trip.
        self._tx.defer("limit_change_lock_wait")
        self._tx.defer("lock_task_runs_for_limit")
        current = self._tx.run("select_task_type_limit", {"task_type": task_type})
        if max_running is None and (not current or current[0]["max_running"] is None):
            return False
        version = current[0]["version"] if current else self._log_version(task_type)
        event = task_type_limit.change_event(task_type, version, max_running, at=at, actor=actor)
        params = {
            "task_type": task_type,
            "max_running": max_running,
            "version": event.originator_version,
            "changed_at": at,
            "changed_by": actor,
        }
        rows = self._tx.run("change_task_type_limit", params)
        if not rows:
            return False
        self._recording.append([event])
        running = int(rows[0]["running"])
        room = max_running - running if max_running is not None else task_type_limit.MAX_RUNNING
        if room > 0:
            self._tx.run("release_held_of_type", {"task_type": task_type, "limit": room})
            self._outbox.enqueued = True
        if max_running is None:
            # Counting nothing any more: deleted, so the type's claims are fast again.
            self._tx.run("delete_idle_type_counter", {"task_type": task_type})
        return True

    def _log_version(self, task_type: str) -> int:
        """The version of ``task_type``'s TaskTypeLimit in the log (0: never changed),
        for a type with no counter row (never made, or deleted once idle)."""
        rows = self._tx.run(
            "select_limit_log_version",
            {"originator_id": task_type_limit.limit_id(task_type)},
        )
        return int(rows[0]["version"])

    def ensure_counters(self, task_types: Sequence[str]) -> None:
        """A counter row for each type a new run's tasks limit (``max_running``), made
        under the lock that lets it count the type's running tasks exactly, if the type
        has none yet (once per type, while its counter row stays). The lock's wait is
        bounded as a change's is: ``TransactionConflictError`` past it (nothing written)."""
        for task_type in sorted(set(task_types)):
            if self._tx.run("select_task_type_limit", {"task_type": task_type}):
                continue
            # The same bounded wait as a change's (its caller tries the whole creation
            # again past it, app/run_commands.py), sent with the lock.
            self._tx.defer("limit_change_lock_wait")
            self._tx.run("lock_task_runs_for_limit")
            version = self._log_version(task_type)
            self._tx.run("ensure_task_type_counter", {"task_type": task_type, "version": version})


def free_statements(task_run_id: UUID, task_type: str, workflow_run_id: UUID) -> list[Statement]:
    """What frees a task's slots once it left running in this transaction (each
    guarded by that in SQL, so a batch may send them before it knows which finish won):
    the run's slot, the type's (the claims' order), then the releases."""
    params: dict[str, Any] = {
        "task_run_id": task_run_id,
        "task_type": task_type,
        "workflow_run_id": workflow_run_id,
    }
    return [
        ("free_run_slot", params),
        ("free_type_slot", params),
        ("release_held_dispatches", params),
    ]


def _refusal(held_by: str, rows: list[Row]) -> Refusal:
    slot = rows[0]
    return Refusal(held_by, int(slot["max_running"]), int(slot["running"]))
