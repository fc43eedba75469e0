"""What the read path says of a run that is not live because it was archived
(``archived_runs``; app/archive.py): where it went and how to bring it back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flowforge import errors, timefmt


def archived_error(row: Mapping[str, Any]) -> errors.ArchivedRunError:
    """The error for the archived run of ``row`` (an ``archived_runs`` row)."""
    return errors.ArchivedRunError(
        f"workflow run {row['workflow_run_id']} ({row['workflow_name']}) was archived "
        f"{timefmt.iso(row['archived_at'])} to {row['archive_file']} ({row['event_count']} "
        f"events, {row['task_count']} tasks); bring it back with `flowforge db restore "
        f"{row['archive_file']}`"
    )
