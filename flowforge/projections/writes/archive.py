"""The archive's reads and writes (``sql/archive.sql``): a run's rows and events read
whole, deleted whole, and put back whole (``app/archive.py`` decides when)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from flowforge.projections.db.protocols import Named, Row, Transaction
from flowforge.projections.reads import id_list, stored_event

#: The bookkeeping tables that go with a run, each with its restore statement.
BOOKKEEPING = {
    "outbox": "restore_outbox_row",
    "run_limits": "restore_run_limit",
    "held_dispatches": "restore_held_dispatch",
    # Each attempt's captured output (attempt_logs.sql): not an event, but the run's.
    "attempt_logs": "restore_attempt_log",
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A run the archive may take: ended before the cutoff, no task left to run."""

    id: UUID
    workflow_name: str
    version: int
    task_count: int


@dataclass(frozen=True, slots=True)
class ArchivedRun:
    """What the deletes need of an archived run (an archive file's manifest has it):
    its id and name, the version of its row, its aggregates (the run's and its tasks'
    ids) and how many events they had."""

    id: UUID
    workflow_name: str
    version: int
    aggregate_ids: tuple[UUID, ...]
    events: int

    @property
    def tasks(self) -> int:
        return len(self.aggregate_ids) - 1


@dataclass(slots=True)
class RunRecord:
    """One run as an archive file holds it: its row, its tasks' rows, its bookkeeping
    rows (``BOOKKEEPING``) and its aggregates' stored events in log order."""

    run: Row
    tasks: list[Row] = field(default_factory=list)
    bookkeeping: dict[str, list[Row]] = field(
        default_factory=lambda: {name: [] for name in BOOKKEEPING}
    )
    events: list[StoredEvent] = field(default_factory=list)

    @property
    def id(self) -> UUID:
        value: UUID = self.run["id"]
        return value

    @property
    def aggregate_ids(self) -> list[UUID]:
        """The run's and its tasks' ids: the originators of its events."""
        return [self.id, *(task["id"] for task in self.tasks)]

    def summary(self) -> ArchivedRun:
        return ArchivedRun(
            self.id,
            self.run["workflow_name"],
            int(self.run["version"]),
            tuple(self.aggregate_ids),
            len(self.events),
        )


@dataclass(frozen=True, slots=True)
class ArchiveFileSummary:
    """What ``archived_runs`` says of one archive file."""

    archive_file: str
    runs: int
    events: int
    task_runs: int
    archived_at: datetime


class ArchiveWrites:
    """The archive's statements in one open transaction."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def candidates(self, before: datetime, limit: int) -> list[Candidate]:
        """The runs ended before ``before``, oldest first, at most ``limit``."""
        rows = self._tx.run("archive_candidates", {"as_of": before, "limit": limit})
        return [
            Candidate(r["id"], r["workflow_name"], int(r["version"]), int(r["task_count"]))
            for r in rows
        ]

    def export(self, run_ids: Collection[UUID]) -> list[RunRecord]:
        """The runs' records, in ``run_ids``' order (a run not here is left out)."""
        ids = {"run_ids": id_list(run_ids)}
        runs, tasks, outbox, limits, held, logs = self._tx.run_each(
            [
                ("archive_run_rows", ids),
                ("archive_task_rows", ids),
                ("archive_outbox_rows", ids),
                ("archive_run_limit_rows", ids),
                ("archive_held_rows", ids),
                ("archive_attempt_log_rows", ids),
            ]
        )
        records = {row["id"]: RunRecord(row) for row in runs}
        owner: dict[UUID, RunRecord] = dict(records)
        for task in tasks:
            record = records[task["workflow_run_id"]]
            record.tasks.append(task)
            owner[task["id"]] = record
        for row in outbox:
            records[row.pop("archived_run_id")].bookkeeping["outbox"].append(row)
        for name, rows in (
            ("run_limits", limits),
            ("held_dispatches", held),
            ("attempt_logs", logs),
        ):
            for row in rows:
                records[row["workflow_run_id"]].bookkeeping[name].append(row)
        params = {"originator_ids": id_list(owner)}
        for row in self._tx.run("archive_events", params):
            event = stored_event(row)
            owner[UUID(str(event.originator_id))].events.append(event)
        return [records[run_id] for run_id in run_ids if run_id in records]

    def lock_runs(self, run_ids: Collection[UUID]) -> dict[UUID, int]:
        """The runs still here and ended, locked until the commit, with their versions."""
        rows = self._tx.run("lock_runs_to_archive", {"run_ids": id_list(run_ids)})
        return {row["id"]: int(row["version"]) for row in rows}

    def count_events(self, aggregate_ids: Collection[UUID]) -> int:
        (row,) = self._tx.run("count_events_of", {"originator_ids": id_list(aggregate_ids)})
        return int(row["event_count"])

    def delete(self, run_ids: Collection[UUID], aggregate_ids: Collection[UUID]) -> None:
        """Every row and event of the runs (children first)."""
        ids = {"run_ids": id_list(run_ids)}
        self._tx.run_each(
            [
                ("archive_delete_events", {"originator_ids": id_list(aggregate_ids)}),
                ("archive_delete_outbox", ids),
                ("archive_delete_held", ids),
                ("archive_delete_attempt_logs", ids),
                ("archive_delete_run_limits", ids),
                ("archive_delete_wakeups", ids),
                ("archive_delete_tasks", ids),
                ("archive_delete_runs", ids),
            ]
        )

    def record_archived(self, archive_file: str, runs: Iterable[ArchivedRun]) -> None:
        self._tx.run_each(
            [
                (
                    "insert_archived_run",
                    {
                        "workflow_run_id": run.id,
                        "workflow_name": run.workflow_name,
                        "archive_file": archive_file,
                        "event_count": run.events,
                        "task_count": run.tasks,
                    },
                )
                for run in runs
            ]
        )

    def live_runs(self, run_ids: Collection[UUID]) -> set[UUID]:
        """Which of the runs have a row (a restore leaves them as they are)."""
        rows = self._tx.run("archive_run_rows", {"run_ids": id_list(run_ids)})
        return {row["id"] for row in rows}

    def taken_keys(self, keys: Collection[str]) -> set[str]:
        """Which of the idempotency keys live runs hold."""
        if not keys:
            return set()
        rows = self._tx.run("select_taken_idempotency_keys", {"idempotency_keys": sorted(keys)})
        return {row["idempotency_key"] for row in rows}

    def restore(self, records: Sequence[RunRecord]) -> None:
        """Put the runs back as they were archived, and forget where they went."""
        statements: list[Named] = []
        for record in records:
            statements.append(("restore_workflow_run", record.run))
            statements += [("restore_task_run", task) for task in record.tasks]
            for name, statement in BOOKKEEPING.items():
                statements += [(statement, row) for row in record.bookkeeping[name]]
            statements += [("insert_stored_event", _event_params(e)) for e in record.events]
            statements.append(("delete_archived_run", {"workflow_run_id": record.id}))
        self._tx.run_each(statements, unread=range(len(statements)))

    def stats(self) -> dict[str, Any]:
        """The live database's counts and size, and its oldest ended run's end."""
        (counts,) = self._tx.run("stats_counts")
        (oldest,) = self._tx.run("stats_oldest_run")
        (size,) = self._tx.run("stats_database_bytes")
        return {**counts, "oldest_finished_at": oldest["finished_at"], "bytes": size["bytes"]}

    def archive_files(self) -> list[ArchiveFileSummary]:
        return [
            ArchiveFileSummary(
                r["archive_file"],
                int(r["runs"]),
                int(r["event_count"]),
                int(r["task_count"]),
                r["archived_at"],
            )
            for r in self._tx.run("stats_archive_files")
        ]


def _event_params(event: StoredEvent) -> Mapping[str, object]:
    return {
        "originator_id": event.originator_id,
        "originator_version": event.originator_version,
        "topic": event.topic,
        "state": event.state,
    }
