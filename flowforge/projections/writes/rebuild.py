"""The rebuild's writes: the projected rows deleted and made again from the event log."""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from flowforge.projections import projector
from flowforge.projections.db.protocols import Transaction
from flowforge.projections.reads import stored_event


class RebuildWrites:
    """The rebuild in one write transaction (``Store.write(rebuild=True)``)."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def stored_events(self) -> list[StoredEvent]:
        """Every stored event, in the order the log recorded them."""
        return [stored_event(row) for row in self._tx.run("select_stored_events")]

    def delete_projections(self) -> None:
        self._tx.run("delete_limits")
        self._tx.run("delete_run_limits")
        self._tx.run("delete_task_runs")
        self._tx.run("delete_workflow_runs")
        self._tx.run("delete_schedules")

    def recount_limits(self) -> None:
        """The limits' counter rows after the log is applied: one for every type a
        task's own limit names, and every counter recounted from the rebuilt rows."""
        self._tx.run("insert_task_type_limit_counters")
        self._tx.run("recount_task_type_limits")
        self._tx.run("recount_run_limits")

    def apply(self, event: DomainEventProtocol[UUID]) -> bool:
        """Apply one event of the log to the rows; False only for a run whose idempotency
        key another run has (``projector.apply_event``)."""
        return projector.apply_event(self._tx, event)

    def apply_all(self, events: Iterable[DomainEventProtocol[UUID]]) -> int:
        """Apply the log's events in order, their statements batched
        (``projector.apply_events``); how many."""
        return projector.apply_events(self._tx, events)

    def fill_missing_task_leases(self) -> None:
        """Give task rows rebuilt from creation events stored before a task's lease was
        recorded (migration 5) the lease of their run's definition."""
        self._tx.run("fill_missing_task_leases")
