"""The rebuild's writes: the projected rows deleted and made again from the event log.

The log is read in pages of its order (``stored_event_pages``); the runs' and tasks'
rows are folded in memory (``folding.py``) and written once each at the end
(``write_folded``): on PostgreSQL a few thousand rows to a statement (a JSON array,
``rebuild_insert_*``, postgres.sql), on SQLite a row to a statement (the restore's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from flowforge.projections import projector
from flowforge.projections.db.protocols import Named, Row, Transaction
from flowforge.projections.folding import Folded
from flowforge.projections.reads import stored_event

#: Events read per page of the log (``stored_event_pages``).
READ_PAGE = 10_000
#: Rows per bulk statement (PostgreSQL's ``rebuild_insert_*``).
WRITE_CHUNK = 5_000


class RebuildWrites:
    """The rebuild in one write transaction (``Store.write(rebuild=True)``). ``bulk``:
    whether the store has the bulk row statements (PostgreSQL)."""

    def __init__(self, tx: Transaction, *, bulk: bool = False) -> None:
        self._tx = tx
        self._bulk = bulk

    def stored_events(self) -> list[StoredEvent]:
        """Every stored event, in the order the log recorded them."""
        return [stored_event(row) for row in self._tx.run("select_stored_events")]

    def stored_event_pages(self, size: int = READ_PAGE) -> Iterator[list[StoredEvent]]:
        """Every stored event in the log's order, ``size`` to a read."""
        position = 0
        while True:
            rows = self._tx.run(
                "select_stored_events_after", {"position": position, "limit": size}
            )
            if not rows:
                return
            position = rows[-1]["position"]
            yield [stored_event(row) for row in rows]

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

    def write_folded(self, folded: Folded) -> None:
        """The folded rows into the emptied tables: runs, their limits, then tasks."""
        runs, tasks = list(folded.runs.values()), list(folded.tasks.values())
        statements: list[Named]
        if self._bulk:
            statements = [
                *_chunks("rebuild_insert_workflow_runs", runs),
                *_chunks("rebuild_insert_task_runs", tasks),
            ]
        else:
            statements = [("restore_workflow_run", row) for row in runs]
            statements += [("restore_task_run", row) for row in tasks]
        statements += [("insert_run_limit", row) for row in folded.run_limits]
        if statements:
            self._tx.run_each(statements, unread=range(len(statements)))

    def fill_missing_task_leases(self) -> None:
        """Give task rows rebuilt from creation events stored before a task's lease was
        recorded (migration 5) the lease of their run's definition."""
        self._tx.run("fill_missing_task_leases")


def _chunks(name: str, rows: Sequence[Row]) -> list[Named]:
    return [
        (name, {"rows_json": json.dumps(rows[i : i + WRITE_CHUNK], default=_json_value)})
        for i in range(0, len(rows), WRITE_CHUNK)
    ]


def _json_value(value: Any) -> str:
    # A time as ISO text to the microsecond with its offset (timestamptz parses it
    # exactly); an id as its text. Nothing else in a row is not JSON already.
    if isinstance(value, datetime | UUID):
        return value.isoformat() if isinstance(value, datetime) else str(value)
    raise TypeError(f"no JSON for a row's {type(value).__name__}")
