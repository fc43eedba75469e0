"""What the read path says of a run that is not live because it was archived
(``archived_runs``; app/archive.py): where it went and how to bring it back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from flowforge import errors, timefmt
from flowforge.app import archive_file


def archived_error(row: Mapping[str, Any], *, task: str = "") -> errors.ArchivedRunError:
    """The error for the archived run of ``row`` (an ``archived_runs`` row); ``task``:
    the task run of it that was asked for, named first."""
    return errors.ArchivedRunError(
        f"{task}workflow run {row['workflow_run_id']} ({row['workflow_name']}) was archived "
        f"{timefmt.iso(row['archived_at'])} to {row['archive_file']} ({row['event_count']} "
        f"events, {row['task_count']} tasks); bring it back with `flowforge db restore "
        f"{row['archive_file']}`"
    )


def runs_holding_task(files: Iterable[str], matches: Callable[[UUID], bool]) -> dict[UUID, UUID]:
    """The task runs ``matches`` accepts in the manifests of ``files``, each with its run
    (``archived_runs`` keeps runs, not their tasks). A file that is gone or unreadable
    is passed over: the caller then says what it says of an unknown task run."""
    found: dict[UUID, UUID] = {}
    for name in files:
        try:
            manifest = archive_file.read_manifest(Path(name))
        except (OSError, errors.ArchiveFileError):
            continue
        for run in manifest.get("runs", []):
            for task in run.get("task_run_ids", []):
                if matches(UUID(task)):
                    found[UUID(task)] = UUID(run["id"])
    return found
