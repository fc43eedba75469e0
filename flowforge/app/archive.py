"""Bounded history: ended runs moved to an archive file, and back (docs/operations.md).

An archive is three steps, each safe to interrupt:

1. **Write.** The runs that ended before the cutoff (and have no task left to run) are
   read in batches and written to the file (``app/archive_file.py``), under a
   temporary name, flushed and renamed into place. Nothing is deleted yet: killed
   here, every run is still live.
2. **Verify.** The file is read back whole: the zip's CRCs, every run's SHA-256, the
   counts. A file that does not read back is refused and nothing is deleted.
3. **Delete**, in batches of runs, each ONE transaction: the batch's runs are locked;
   each run still here, ended, with the version and the number of events the file has,
   loses its rows, its bookkeeping (dispatches, limit counters, wake-up marks) and its
   events, and gets its ``archived_runs`` row naming the file. A run that is gone
   (another archiver took it) or changed is left as it is. Killed here, each run is
   fully live or fully archived: its deletes and its ``archived_runs`` row commit
   together.

Given a file that exists, the archive starts at step 2: it finishes the deletes of an
archive that was interrupted, and changes nothing when run again. A restore verifies
the file, then puts back, in batches of one transaction each, every run of it that is
not live, and deletes its ``archived_runs`` row: restored twice, the second changes
nothing.

At most one archiver works on a database at a time (``Database.archiver_lock``:
PostgreSQL's advisory lock; on SQLite, the embedded single-process mode, a file lock
beside the database): a second one is refused with ``ArchiverBusyError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from flowforge import errors, timefmt
from flowforge.app import archive_file
from flowforge.app.collector import collection_paused
from flowforge.projections.store import Store
from flowforge.projections.writes.archive import ArchivedRun, Candidate, RunRecord

#: A batch's bounds: its runs and its aggregates (a run and its tasks) or events. One
#: batch is one transaction, whose rows stay locked until it commits.
BATCH_RUNS = 200
BATCH_AGGREGATES = 4000
BATCH_EVENTS = 12000
#: At most this many runs per archive file by default.
MAX_RUNS_PER_FILE = 1_000_000

#: The scheduler's retention archives at most this many runs per pass, so that a pass
#: stays short; a backlog takes several passes (docs/operations.md).
RETENTION_RUNS = 2000
#: An archive file's name's ending.
SUFFIX = ".ffarchive"

#: ``progress(step, done, total)``: ``step`` is "write", "verify", "delete" or "restore".
Progress = Callable[[str, int, int], None]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    """What an archive did: the file (None: no run to archive, no file written), its
    runs and events, how many of them it archived now (deleted from the live database),
    those that were gone already (archived before: a second archive of the file) and
    those it left live (changed since the file was written)."""

    file: Path | None
    runs: int
    events: int
    archived: int
    archived_events: int
    already_gone: int
    left_live: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RestoreReport:
    file: Path
    runs: int
    restored: int
    restored_events: int
    already_live: int
    seconds: float
    #: Runs left in the file: a live run started since their archive holds their
    #: idempotency key (a key names one run), by id.
    key_taken: tuple[UUID, ...] = ()


def no_progress(step: str, done: int, total: int) -> None:
    del step, done, total


def archive(
    store: Store,
    to: Path,
    *,
    older_than: timedelta,
    source: dict[str, Any],
    limit: int = MAX_RUNS_PER_FILE,
    progress: Progress = no_progress,
    between_batches: Callable[[int], None] | None = None,
) -> ArchiveReport:
    """Archive the runs that ended more than ``older_than`` ago (by the database's
    clock) into ``to``; or, if ``to`` exists, finish deleting its runs."""
    started = time.monotonic()
    with store.database.archiver_lock() as taken:
        if not taken:
            raise errors.ArchiverBusyError()
        if not to.exists():
            with store.read() as reads:
                cutoff = reads.now() - older_than
            with store.archive_read() as reads:
                chosen = reads.candidates(cutoff, limit)
            if not chosen:
                return ArchiveReport(None, 0, 0, 0, 0, 0, 0, time.monotonic() - started)
            header = {**source, "finished_before": timefmt.iso(cutoff)}
            _write(store, to, chosen, header, progress)
        manifest = archive_file.verify(to)
        total = len(manifest["runs"])
        progress("verify", total, total)
        archived, events, gone = _delete(store, to, manifest, progress, between_batches)
    counts = manifest["counts"]
    return ArchiveReport(
        to,
        counts["runs"],
        counts["events"],
        archived,
        events,
        gone,
        counts["runs"] - archived - gone,
        time.monotonic() - started,
    )


def _write(
    store: Store,
    to: Path,
    chosen: Sequence[Candidate],
    header: dict[str, Any],
    progress: Progress,
) -> None:
    to.parent.mkdir(parents=True, exist_ok=True)
    writer = archive_file.ArchiveWriter(to, {**header, "created_at": _now_iso()})
    try:
        done = 0
        for batch in _batches(chosen, lambda c: 1 + c.task_count, BATCH_AGGREGATES):
            # A batch's rows and events are tens of thousands of small objects, none in
            # a cycle: no cyclic collections while they are read and written.
            with collection_paused():
                with store.archive_read() as reads:
                    records = reads.export([c.id for c in batch])
                for record in records:
                    writer.add(record)
                del records
            done += len(batch)
            progress("write", done, len(chosen))
        writer.finish()
    except BaseException:
        writer.abandon()
        raise


def _delete(
    store: Store,
    to: Path,
    manifest: dict[str, Any],
    progress: Progress,
    between_batches: Callable[[int], None] | None,
) -> tuple[int, int, int]:
    """Delete the file's runs that are live and as the file has them: how many runs and
    events it archived, and how many runs were gone already."""
    total, done, archived, events, gone = len(manifest["runs"]), 0, 0, 0, 0
    name = str(to.resolve())
    batches = _batches(archive_file.manifest_runs(manifest), _weight_of_run, BATCH_EVENTS)
    for number, batch in enumerate(batches, start=1):
        with store.write() as writes:
            versions = writes.archive.lock_runs([r.id for r in batch])
            gone += sum(1 for r in batch if r.id not in versions)
            kept = [r for r in batch if versions.get(r.id) == r.version]
            aggregates = [a for r in kept for a in r.aggregate_ids]
            if kept and writes.archive.count_events(aggregates) != sum(r.events for r in kept):
                kept = [r for r in kept if _unchanged(writes.archive.count_events, r)]
                aggregates = [a for r in kept for a in r.aggregate_ids]
            if kept:
                writes.archive.delete([r.id for r in kept], aggregates)
                writes.archive.record_archived(name, kept)
        archived += len(kept)
        events += sum(r.events for r in kept)
        done += len(batch)
        progress("delete", done, total)
        if between_batches is not None:
            between_batches(number)
    return archived, events, gone


def _unchanged(count_events: Callable[[list[Any]], int], run: ArchivedRun) -> bool:
    """The run's aggregates have exactly the events the file holds (one by one, after a
    batch's total disagreed: a run that changed since it was written stays live)."""
    return count_events(list(run.aggregate_ids)) == run.events


def apply_retention(
    store: Store,
    directory: Path,
    *,
    older_than: timedelta,
    source: dict[str, Any],
    name: str,
    limit: int = RETENTION_RUNS,
) -> ArchiveReport | None:
    """Archive up to ``limit`` runs ended more than ``older_than`` ago into a new file
    in ``directory`` (``<name>-<UTC time>.ffarchive``); None if another archiver is at
    work. A file left unfinished by an archiver killed while writing it is removed (the
    lock is held: nobody is writing it)."""
    with store.database.archiver_lock() as taken:
        if not taken:
            return None
        for partial in directory.glob(f"{name}-*{SUFFIX}.partial"):
            partial.unlink(missing_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    try:
        return archive(
            store,
            directory / f"{name}-{stamp}{SUFFIX}",
            older_than=older_than,
            source=source,
            limit=limit,
        )
    except errors.ArchiverBusyError:
        return None


def restore(store: Store, path: Path, *, progress: Progress = no_progress) -> RestoreReport:
    """Put back every run of the archive file that is not live."""
    started = time.monotonic()
    with store.database.archiver_lock() as taken:
        if not taken:
            raise errors.ArchiverBusyError()
        manifest = archive_file.verify(path)
        total = len(manifest["runs"])
        progress("verify", total, total)
        done = restored = events = 0
        key_taken: list[UUID] = []
        for batch in _batches(archive_file.records(path, manifest), _weight, BATCH_EVENTS):
            with store.write() as writes:
                live = writes.archive.live_runs([r.id for r in batch])
                back = [r for r in batch if r.id not in live]
                held = writes.archive.taken_keys(_keys(back))
                key_taken += [r.id for r in back if r.run["idempotency_key"] in held]
                back = [r for r in back if r.run["idempotency_key"] not in held]
                if back:
                    writes.archive.restore(back)
            restored += len(back)
            events += sum(len(r.events) for r in back)
            done += len(batch)
            progress("restore", done, total)
    return RestoreReport(
        path,
        total,
        restored,
        events,
        total - restored - len(key_taken),
        time.monotonic() - started,
        tuple(key_taken),
    )


def _keys(records: Iterable[RunRecord]) -> set[str]:
    return {r.run["idempotency_key"] for r in records if r.run["idempotency_key"] is not None}


def _weight(record: RunRecord) -> int:
    return len(record.events) + len(record.tasks) + 1


def _weight_of_run(run: ArchivedRun) -> int:
    return run.events + len(run.aggregate_ids)


def _batches(items: Iterable[_T], weight: Callable[[_T], int], bound: int) -> Iterator[list[_T]]:
    """``items`` in batches of at most ``BATCH_RUNS`` whose weights sum to about ``bound``
    (a batch holds at least one item, whatever its weight)."""
    batch: list[_T] = []
    load = 0
    for item in items:
        batch.append(item)
        load += weight(item)
        if load >= bound or len(batch) >= BATCH_RUNS:
            yield batch
            batch, load = [], 0
    if batch:
        yield batch


def _now_iso() -> str:
    return timefmt.iso(datetime.now(UTC))
