"""``flowforge db stats``: how big the live database is, and what was archived
(docs/operations.md turns these numbers into a growth model)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from flowforge.projections.store import Store

#: The tables ``db stats`` counts, in the order it shows them.
TABLES = (
    "events",
    "workflow_runs",
    "task_runs",
    "dispatch_outbox",
    "run_wakeups",
    "run_limits",
    "held_dispatches",
    "schedules",
    "archived_runs",
)


@dataclass(frozen=True, slots=True)
class ArchiveFileView:
    """One archive file as ``archived_runs`` knows it: the runs it holds that are not
    live (a restored run is no longer counted), their events and tasks, and when the
    last of them was archived."""

    path: Path
    runs: int
    events: int
    task_runs: int
    archived_at: datetime
    exists: bool


@dataclass(frozen=True, slots=True)
class DatabaseStats:
    """The live database: rows per table, the events' stored bytes (topic and state),
    the database's size on disk, its oldest ended run, and the archive files."""

    rows: dict[str, int]
    event_bytes: int
    database_bytes: int
    oldest_finished_at: datetime | None
    archive_files: list[ArchiveFileView]

    @property
    def events(self) -> int:
        return self.rows["events"]

    @property
    def bytes_per_event(self) -> float:
        """The stored bytes of an event, on average (its topic and state; the row's
        other columns and the indexes come on top: see ``database_bytes``)."""
        return self.event_bytes / self.events if self.events else 0.0

    @property
    def events_per_task(self) -> float:
        """Events per task run, the run's own events included."""
        tasks = self.rows["task_runs"]
        return self.events / tasks if tasks else 0.0


def database_stats(store: Store) -> DatabaseStats:
    with store.archive_read() as reads:
        counts = reads.stats()
        files = reads.archive_files()
    return DatabaseStats(
        rows={name: int(counts[name]) for name in TABLES},
        event_bytes=int(counts["event_bytes"]),
        database_bytes=int(counts["bytes"]),
        oldest_finished_at=counts["oldest_finished_at"],
        archive_files=[
            ArchiveFileView(
                Path(f.archive_file),
                f.runs,
                f.events,
                f.task_runs,
                f.archived_at,
                Path(f.archive_file).exists(),
            )
            for f in files
        ],
    )
