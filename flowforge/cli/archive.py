"""``flowforge db archive``, ``db restore`` and ``db stats``: bounded history
(docs/operations.md; the work is ``app/archive.py``'s).

Both moves show a progress bar on a terminal (one line redrawn per step: write, verify,
delete or restore) and, into a pipe or a file, one line per step when it ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from flowforge import timefmt
from flowforge.app.archive import RestoreReport
from flowforge.app.db_stats import TABLES, DatabaseStats
from flowforge.cli import common, render
from flowforge.cli.exits import EXIT_FAILED
from flowforge.cli.progress import is_terminal

#: A test's hook (tests/e2e/test_archive_kill.py): ``N:PATH`` makes the archiver, after
#: its Nth delete batch commits, create PATH and wait while it exists, so that a test
#: can kill it there. Unset in any real use.
PAUSE_VARIABLE = "FLOWFORGE_TEST_ARCHIVE_PAUSE"
_BAR_WIDTH = 30


class Bar:
    """The progress of one move: ``update(step, done, total)``."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._stream = stream
        self._live = is_terminal(stream)
        self._step: str | None = None

    def update(self, step: str, done: int, total: int) -> None:
        if self._live:
            filled = _BAR_WIDTH * done // total if total else _BAR_WIDTH
            bar = "#" * filled + "." * (_BAR_WIDTH - filled)
            end = "\n" if done >= total else ""
            self._stream.write(f"\r{step:<8} [{bar}] {done}/{total} runs{end}")
        elif done >= total and step != self._step:
            self._stream.write(f"{step}: {done}/{total} runs\n")
        self._step = step if done >= total else None
        self._stream.flush()


def archive(args: argparse.Namespace) -> int:
    to = Path(args.archive_to)
    with common.open_app(common.settings_from(args)) as app:
        report = app.archive_runs(
            to,
            older_than=args.finished_before,
            progress=Bar().update,
            between_batches=_pause_hook(),
        )
    if report.file is None:
        print(f"no run ended more than {_age(args)} ago: nothing archived")
        return 0
    print(
        f"archived {report.archived} runs ({report.archived_events} events) to {report.file} "
        f"in {report.seconds:.1f}s; the file holds {report.runs} runs, {report.events} events"
    )
    if report.already_gone:
        print(f"  {report.already_gone} runs of the file were archived before")
    if report.left_live:
        print(f"  {report.left_live} runs changed since the file was written and stay live")
    return 0


def restore(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        report = app.restore_runs(Path(args.file), progress=Bar().update)
    for line in restore_lines(report):
        print(line)
    return EXIT_FAILED if report.key_taken else 0


def restore_lines(report: RestoreReport) -> list[str]:
    """What a restore says: what came back, and plainly why anything did not."""
    if report.restored == 0 and report.already_live == report.runs:
        return [
            f"nothing to restore: all {report.runs} runs of {report.file} are live already "
            f"(restored before); nothing was changed"
        ]
    lines = [
        f"restored {report.restored} runs ({report.restored_events} events) from "
        f"{report.file} in {report.seconds:.1f}s"
    ]
    if report.already_live:
        lines.append(
            f"  {report.already_live} runs of the file were live already: left as they are"
        )
    if report.key_taken:
        shown = ", ".join(str(run) for run in report.key_taken[:5])
        lines.append(
            f"  {len(report.key_taken)} runs NOT restored: a run started since they were "
            f"archived holds each one's idempotency key ({shown}"
            f"{', ...' if len(report.key_taken) > 5 else ''}); they stay in the file"
        )
    return lines


def stats(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        found = app.database_stats()
    if args.json:
        print(render.to_json(_facts(found)))
        return 0
    for line in _lines(found):
        print(line)
    return 0


def _lines(found: DatabaseStats) -> list[str]:
    lines = [
        f"events            {found.events}",
        f"bytes per event   {found.bytes_per_event:.0f} (topic and state)",
        f"events per task   {found.events_per_task:.2f}",
        f"database size     {found.database_bytes / 1e6:.1f} MB",
        f"oldest ended run  {timefmt.iso(found.oldest_finished_at, 'none')}",
        "rows per table",
        *(f"  {name:<16}{found.rows[name]}" for name in TABLES),
        f"archive files     {len(found.archive_files)}",
    ]
    lines += [
        f"  {f.path}  {f.runs} runs, {f.events} events, last {timefmt.iso(f.archived_at)}"
        + ("" if f.exists else "  (MISSING: restore needs it)")
        for f in found.archive_files
    ]
    return lines


def _facts(found: DatabaseStats) -> dict[str, object]:
    return {
        **dataclasses.asdict(found),
        "events": found.events,
        "bytes_per_event": found.bytes_per_event,
        "events_per_task": found.events_per_task,
        "archive_files": [
            {**dataclasses.asdict(f), "path": str(f.path)} for f in found.archive_files
        ],
    }


def _age(args: argparse.Namespace) -> str:
    seconds = int(args.finished_before.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _pause_hook() -> Callable[[int], None] | None:
    setting = os.environ.get(PAUSE_VARIABLE)
    if not setting:
        return None
    at, _, path = setting.partition(":")

    def pause(batch: int) -> None:
        if batch == int(at):
            marker = Path(path)
            marker.write_text(str(os.getpid()))
            while marker.exists():
                time.sleep(0.05)

    return pause
