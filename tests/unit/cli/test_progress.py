"""Live progress at an 80-column terminal: every line fits, long errors are cut, a
redraw leaves no stale lines, states are coloured, and NO_COLOR turns colour off."""

from __future__ import annotations

import io
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.cli.progress import Progress

NOW = datetime.now(UTC)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
KEYS = ("extract", "transform_everything_for_the_warehouse", "load")
DEFINITION = {
    "name": "nightly_warehouse_refresh",
    "tasks": [
        {"key": KEYS[0], "type": "t"},
        {"key": KEYS[1], "type": "t", "depends_on": [KEYS[0]]},
        {"key": KEYS[2], "type": "t", "depends_on": [KEYS[1]]},
    ],
}
LONG_ERROR = {
    "type": "ConnectionError",
    "message": "the enrichment service at https://enrich.internal.example/v2 timed out "
    "after 30 s while sending 18,000 rows; " * 3,
    "traceback": "",
}


def run(state: str = "running") -> WorkflowRunView:
    return WorkflowRunView(
        id=uuid.UUID(int=1),
        workflow_name="nightly_warehouse_refresh",
        definition=DEFINITION,
        inputs={},
        idempotency_key=None,
        rerun_of=None,
        start_at=None,
        trace_context=None,
        state=state,
        started_at=NOW,
        finished_at=None,
        version=1,
        created_at=NOW,
        updated_at=NOW,
    )


def task(key: str, state: str, **fields: Any) -> TaskRunView:
    values: dict[str, Any] = {
        "id": uuid.uuid5(uuid.NAMESPACE_DNS, key),
        "workflow_run_id": uuid.UUID(int=1),
        "task_key": key,
        "task_type": "t",
        "depends_on": [],
        "max_attempts": 3,
        "lease_seconds": 30.0,
        "timeout_seconds": None,
        "max_running": None,
        "max_worker_losses": None,
        "map_index": None,
        "map_item": None,
        "state": state,
        "fencing_token": 1,
        "attempt": 1,
        "lease_owner": None,
        "lease_expires_at": None,
        "deadline_at": None,
        "started_at": NOW,
        "finished_at": None,
        "retry_due_at": None,
        "result": None,
        "error": None,
        "carried_from_run_id": None,
        "carried_from_task_run_id": None,
        "carried_from_attempt": None,
        "worker_losses": 0,
        "version": 1,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return TaskRunView(**{**values, **fields})


def snapshot_1() -> list[TaskRunView]:
    return [
        task(KEYS[0], "running", lease_owner="worker-on-a-host-with-a-long-name-7f3a9c"),
        task(KEYS[1], "pending"),
        task(KEYS[2], "pending"),
    ]


def snapshot_2() -> list[TaskRunView]:
    return [
        task(KEYS[0], "succeeded", finished_at=NOW + timedelta(seconds=2), result={"rows": 8}),
        task(KEYS[1], "retrying", attempt=2, error=LONG_ERROR),
        task(KEYS[2], "pending"),
    ]


def screen(output: str, width: int) -> list[str]:
    """What a terminal of ``width`` columns shows after ``output``: cursor-up and
    clear-to-end are obeyed, and a line longer than ``width`` wraps."""
    rows: list[str] = []
    cursor = 0
    for token in re.split(r"(\x1b\[\d+F|\x1b\[J|\n)", ANSI.sub(_keep_moves, output)):
        if token == "\n":
            cursor += 1
        elif token.startswith("\x1b[") and token.endswith("F"):
            cursor -= int(token[2:-1])
        elif token == "\x1b[J":
            del rows[cursor:]
        elif token:
            pieces = [token[i : i + width] for i in range(0, len(token), width)]
            for piece in pieces:
                rows[cursor:cursor] = [] if cursor < len(rows) else [""] * (cursor - len(rows))
                if cursor < len(rows):
                    rows[cursor] = piece
                else:
                    rows.append(piece)
                if piece is not pieces[-1]:
                    cursor += 1
    return rows


def _keep_moves(match: re.Match[str]) -> str:
    code = match.group()
    return code if code.endswith(("F", "J")) else ""


def draw(*snapshots: list[TaskRunView], color: bool = False, width: int = 80) -> str:
    out = io.StringIO()
    progress = Progress(out, live=True, width=width, color=color)
    for tasks in snapshots:
        progress.update(run(), tasks)
    return out.getvalue()


def test_every_line_of_the_live_block_fits_80_columns() -> None:
    output = draw(snapshot_1(), snapshot_2())
    for line in ANSI.sub("", output).splitlines():
        assert len(line) <= 80, line


def test_a_long_error_is_cut_with_an_ellipsis() -> None:
    shown = screen(draw(snapshot_2()), 80)
    (error,) = [row for row in shown if "ConnectionError" in row]
    assert error.startswith("      ConnectionError: the enrichment")
    assert error.endswith("…")


def test_a_redraw_leaves_no_stale_lines() -> None:
    def timeless(rows: list[str]) -> list[str]:  # durations run on the wall clock
        return [re.sub(r"\d+\.\d+s", "_s", row) for row in rows]

    redrawn = screen(draw(snapshot_1(), snapshot_2()), 80)
    assert timeless(redrawn) == timeless(screen(draw(snapshot_2()), 80))
    assert len(screen(draw(snapshot_2()), 80)) == 1 + 1 + 3 + 1  # summary, header, tasks, error


def test_states_are_coloured_on_a_terminal() -> None:
    output = draw(snapshot_2(), color=True)
    assert "\x1b[32msucceeded" in output  # green
    assert "\x1b[33mretrying" in output  # yellow


def test_no_color_turns_colour_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    progress = Progress(out, live=True, width=80)
    progress.update(run(), snapshot_2())
    text = out.getvalue()
    assert "succeeded" in text
    assert not re.search(r"\x1b\[[0-9;]*m", text)


def test_into_a_pipe_each_change_is_one_plain_line_with_the_error_shortened() -> None:
    out = io.StringIO()
    progress = Progress(out, live=False)
    progress.update(run(), snapshot_1())
    progress.update(run(), snapshot_2())
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    (retry,) = [line for line in lines if "-> retrying" in line]
    error = retry.split("(attempt 2/3): ", 1)[1]
    assert error.startswith("ConnectionError: the enrichment")
    assert error.endswith("…")
    assert len(error) <= 120
    assert re.match(r"\d\d:\d\d:\d\dZ ", lines[0])


def test_a_change_is_stamped_with_when_it_happened_not_when_it_was_seen() -> None:
    """Issue #49: `status --watch` of a run that ended long ago printed the time it
    looked at each change; it prints the time the database recorded it."""
    out = io.StringIO()
    long_ago = NOW - timedelta(hours=3)
    ended = replace(run("succeeded"), finished_at=long_ago, updated_at=long_ago)
    Progress(out, live=False).update(ended, [task(KEYS[0], "succeeded", updated_at=long_ago)])
    stamps = {line.split()[0] for line in out.getvalue().splitlines()}
    assert stamps == {long_ago.strftime("%H:%M:%SZ")}
