"""The archive file: a zip of a manifest, a README and one JSON line per run.

Self-describing on purpose: ``manifest.json`` names the format and its version, where
the runs came from (database, deployment, schema version), the cutoff, the counts, the
SHA-256 of the runs member and of each run's line; ``README.txt`` says how to read it
without FlowForge. ``runs.jsonl`` holds, per run, its rows (every column, by name: a
UUID as its text, a time as ISO 8601 to the microsecond with its offset, JSON as JSON)
and its events in the ``eventsourcing`` library's stored form (``originator_id``,
``originator_version``, ``topic``, and ``state``: the stored bytes, which are UTF-8
JSON written by the library's transcoder, ``projections/event_log.py``), in log order.
A ``StoredEvent`` made of those four fields is what the library's mapper reads.

A file is written under a temporary name, flushed to disk and renamed into place, so a
file at the named path is whole. Reading checks the zip's CRCs, every SHA-256 and every
count against the manifest; anything else is :class:`~flowforge.errors.CorruptArchiveError`
and nothing is deleted or restored on its account (``app/archive.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from flowforge import errors, timefmt
from flowforge.projections.tables import COLUMN_CODECS, ColumnCodec
from flowforge.projections.writes.archive import BOOKKEEPING, ArchivedRun, RunRecord

FORMAT = "flowforge-archive"
FORMAT_VERSION = 1
MANIFEST, RUNS, README = "manifest.json", "runs.jsonl", "README.txt"
#: deflate at its default level: an event compresses about 6 to 1 (docs/operations.md).
_COMPRESSION, _LEVEL = zipfile.ZIP_DEFLATED, 6

_README = """\
A FlowForge archive (format flowforge-archive, version 1): runs moved out of a live
database by `flowforge db archive`; `flowforge db restore FILE` puts them back.

manifest.json  the format, the source database, the cutoff, the counts, the SHA-256 of
               runs.jsonl and of each of its lines (one per run, in file order).
runs.jsonl     one JSON object per run: "run" (its workflow_runs row), "tasks" (its
               task_runs rows), "outbox", "run_limits", "held_dispatches",
               "attempt_logs" (its bookkeeping rows; a file may lack the last: a
               run archived before attempt logs existed) and "events": the run's
               and its tasks' events in log order, each in the eventsourcing
               library's stored form: originator_id, originator_version, topic,
               state (the stored bytes: UTF-8 JSON written by the library's JSON
               transcoder, no compressor, no cipher; or state_base64 where they are
               not UTF-8). Rows: UUIDs as text, times as ISO 8601 with their
               offset, JSON columns as JSON.
"""


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ArchiveWriter:
    """Writes one archive file: ``add`` each run, then ``finish`` (atomically in place)."""

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self._partial = path.with_name(path.name + ".partial")
        self._header = dict(header)
        self._zip = zipfile.ZipFile(
            self._partial, "w", compression=_COMPRESSION, compresslevel=_LEVEL
        )
        self._member: IO[bytes] = self._zip.open(RUNS, "w", force_zip64=True)
        self._digest = hashlib.sha256()
        self._bytes = 0
        self._runs: list[dict[str, Any]] = []
        self._counts = dict.fromkeys(("events", "task_runs", *BOOKKEEPING), 0)

    def add(self, record: RunRecord) -> None:
        line = encode_record(record)
        self._member.write(line)
        self._digest.update(line)
        self._bytes += len(line)
        self._runs.append(
            {
                "id": str(record.id),
                "workflow_name": record.run["workflow_name"],
                "version": record.run["version"],
                "events": len(record.events),
                "task_runs": len(record.tasks),
                "task_run_ids": [str(task["id"]) for task in record.tasks],
                "sha256": _hash(line),
            }
        )
        self._counts["events"] += len(record.events)
        self._counts["task_runs"] += len(record.tasks)
        for name in BOOKKEEPING:
            self._counts[name] += len(record.bookkeeping[name])

    def finish(self) -> dict[str, Any]:
        """Close the file, flush it to disk and move it into place; its manifest."""
        self._member.close()
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **self._header,
            "counts": {"runs": len(self._runs), **self._counts},
            "members": {RUNS: {"sha256": self._digest.hexdigest(), "bytes": self._bytes}},
            "runs_sha256": _runs_hash(self._runs),
            "runs": self._runs,
        }
        self._zip.writestr(README, _README)
        self._zip.writestr(MANIFEST, json.dumps(manifest, indent=1))
        self._zip.close()
        _sync(self._partial)
        os.replace(self._partial, self.path)
        _sync(self.path.parent)
        return manifest

    def abandon(self) -> None:
        """Close and remove the unfinished file (an error while writing it)."""
        self._member.close()
        self._zip.close()
        self._partial.unlink(missing_ok=True)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(path: Path) -> dict[str, Any]:
    """The file's manifest, checked to be one of this format (not its runs: ``records``)."""
    with _opened(path) as archive:
        try:
            manifest = json.loads(archive.read(MANIFEST))
        except KeyError:
            raise _corrupt(path, "it has no manifest.json") from None
        except (ValueError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise _corrupt(path, f"its manifest cannot be read ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _corrupt(path, f"it is not a {FORMAT} file")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise _corrupt(
            path,
            f"its format version is {manifest.get('format_version')!r}; this FlowForge "
            f"reads version {FORMAT_VERSION}",
        )
    return manifest


def verify(path: Path) -> dict[str, Any]:
    """Read the whole file, checking every checksum and count; its manifest. Its runs'
    lines are checked by their SHA-256, not decoded: the deletes read what they need
    from the manifest (``manifest_runs``), whose list of runs has its own SHA-256."""
    manifest = read_manifest(path)
    try:
        listed = _runs_hash(manifest["runs"]) == manifest["runs_sha256"]
    except (KeyError, TypeError, ValueError):
        listed = False
    if not listed:
        raise _corrupt(path, "its manifest's list of runs does not match its checksum")
    for _ in _lines(path, manifest):
        pass
    return manifest


def manifest_runs(manifest: Mapping[str, Any]) -> Iterator[ArchivedRun]:
    """The runs of a verified file's manifest, in file order."""
    for run in manifest["runs"]:
        yield ArchivedRun(
            UUID(run["id"]),
            run["workflow_name"],
            int(run["version"]),
            (UUID(run["id"]), *(UUID(task) for task in run["task_run_ids"])),
            int(run["events"]),
        )


def records(path: Path, manifest: Mapping[str, Any]) -> Iterator[RunRecord]:
    """The file's runs in order, each checked against the manifest as it is read."""
    for expected, line in _lines(path, manifest):
        record = decode_record(line)
        if record.summary() != next(manifest_runs({"runs": [expected]})):
            raise _corrupt(path, f"run {record.id} is not what its manifest lists")
        yield record


def _lines(path: Path, manifest: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Each run's line with its manifest entry, its SHA-256 checked; the whole member's
    checksum and the number of runs are checked after the last."""
    expected: list[dict[str, Any]] = manifest["runs"]
    digest, seen = hashlib.sha256(), 0
    with _opened(path) as archive, _member(archive, path) as member:
        try:
            for line in _split_lines(member):
                digest.update(line)
                if seen >= len(expected) or _hash(line) != expected[seen]["sha256"]:
                    raise _corrupt(path, f"run {seen + 1} does not match its checksum")
                seen += 1
                yield expected[seen - 1], line
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise _corrupt(path, f"its runs cannot be read ({exc})") from exc
    want = manifest["members"][RUNS]["sha256"]
    if seen != len(expected) or digest.hexdigest() != want:
        raise _corrupt(path, f"it holds {seen} of the {len(expected)} runs its manifest lists")


#: How much of the runs member a read decompresses at once (its lines, one per run,
#: are long: a line read in the zip module's 4 KiB steps was most of the read back).
_READ_CHUNK = 1 << 20


def _split_lines(member: IO[bytes]) -> Iterator[bytes]:
    """The member's lines (each with its newline; the last one may lack it)."""
    rest = b""
    while chunk := member.read(_READ_CHUNK):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
    if rest:
        yield rest


def _runs_hash(runs: Any) -> str:
    return _hash(json.dumps(runs, sort_keys=True, separators=(",", ":")).encode())


@contextmanager
def _opened(path: Path) -> Iterator[zipfile.ZipFile]:
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise errors.ArchiveFileError(f"no archive file {path}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise _corrupt(path, f"it is not a whole zip file ({exc})") from exc
    with archive:
        yield archive


def _member(archive: zipfile.ZipFile, path: Path) -> IO[bytes]:
    try:
        return archive.open(RUNS)
    except KeyError:
        raise _corrupt(path, f"it has no {RUNS}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise _corrupt(path, f"its {RUNS} cannot be opened ({exc})") from exc


def _corrupt(path: Path, why: str) -> errors.CorruptArchiveError:
    return errors.CorruptArchiveError(
        f"the archive file {path} is refused: {why}; nothing was deleted or restored. "
        f"Use an intact copy of the file (its manifest.json lists each run's SHA-256)"
    )


# --- a run as one JSON line ----------------------------------------------------------------


def encode_record(record: RunRecord) -> bytes:
    # The rows as they are: their ids and times are written by ``_value``, which the
    # encoder calls for them alone (a Python call per column was a third of the time).
    document = {
        "run": record.run,
        "tasks": record.tasks,
        **record.bookkeeping,
        "events": [_event(event) for event in record.events],
    }
    line = json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=_value)
    return line.encode() + b"\n"


def decode_record(line: bytes) -> RunRecord:
    try:
        document = json.loads(line)
        return RunRecord(
            run=_unrow(document["run"]),
            tasks=[_unrow(task) for task in document["tasks"]],
            bookkeeping={
                # .get: a file written before attempt logs were archived has none.
                name: [_unrow(r) for r in document.get(name, [])]
                for name in BOOKKEEPING
            },
            events=[_unevent(event) for event in document["events"]],
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.CorruptArchiveError(f"a run's line cannot be read ({exc})") from exc


def _value(value: Any) -> Any:
    """A row's value JSON has no type for: an id as its text, a time as ISO 8601."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"an archive row holds a {type(value).__name__}")


def _unrow(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _unvalue(COLUMN_CODECS.get(name), value) for name, value in row.items()}


def _unvalue(kind: ColumnCodec | None, value: Any) -> Any:
    if value is None:
        return None
    if kind in (ColumnCodec.UUID, ColumnCodec.ORIGINATOR_ID):
        return UUID(value)
    if kind is ColumnCodec.TIMESTAMP:
        return timefmt.parse_iso(value)
    return value


def _event(event: StoredEvent) -> dict[str, Any]:
    stored = {
        "originator_id": str(event.originator_id),
        "originator_version": event.originator_version,
        "topic": event.topic,
    }
    try:
        stored["state"] = event.state.decode("utf-8")
    except UnicodeDecodeError:
        stored["state_base64"] = base64.b64encode(event.state).decode()
    return stored


def _unevent(stored: Mapping[str, Any]) -> StoredEvent:
    if "state" in stored:
        state = stored["state"].encode("utf-8")
    else:
        state = base64.b64decode(stored["state_base64"], validate=True)
    return StoredEvent(
        originator_id=UUID(stored["originator_id"]),
        originator_version=int(stored["originator_version"]),
        topic=str(stored["topic"]),
        state=state,
    )
