"""The web UI's live updates on both backends (docs/ui.md, "Live updates"): a page's
event stream (`/events`, served by a real uvicorn server) says `change` after a commit,
with the audit log's new position, whether the commit rang a bell (a new run's dispatch;
on PostgreSQL a notification) or rang none (a claim, seen by the poll)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from flowforge.app.service import FlowForge
from flowforge.ui.server import serving
from tests.helpers import task_id

ONE = {"name": "one", "tasks": [{"key": "a", "type": "t"}]}
WAIT_S = 10.0


@pytest.fixture
def served(app: FlowForge) -> Iterator[str]:
    """The UI over ``app`` on a free port, in a thread of this process."""
    with serving(app) as url:
        yield url


def change_after(lines: Iterator[str], position: int) -> int:
    """The position of the stream's first ``change`` event past ``position`` (the feed
    also says ``change`` once more shortly after each, at the same position)."""
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "change":
            told = int(line.removeprefix("data: "))
            assert told >= position, f"the stream went back from {position} to {told}"
            if told > position:
                return told
    raise AssertionError("the stream ended")


def test_the_event_stream_says_change_after_each_commit(app: FlowForge, served: str) -> None:
    with httpx.stream("GET", f"{served}/events", timeout=WAIT_S) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines) == "retry: 2000"

        run_id = app.start_workflow_run(ONE)  # its dispatch rings the outbox's bell
        position = change_after(lines, 0)
        assert position == app.last_change()

        claim = app.claim_task_run(task_id(app, run_id, "a"), "w1")  # rings no bell
        assert claim is not None
        assert change_after(lines, position) == app.last_change()


def test_a_page_shown_now_follows_changes_and_one_as_of_a_moment_does_not(
    app: FlowForge, served: str
) -> None:
    run_id = app.start_workflow_run(ONE)
    runs = httpx.get(f"{served}/").text
    assert 'data-live="/events"' in runs
    assert 'data-live="/events"' in httpx.get(f"{served}/runs/{run_id}").text
    at = app.database_now().isoformat()
    as_of = httpx.get(f"{served}/runs/{run_id}", params={"at": at}).text
    assert "data-live" not in as_of
    script = httpx.get(f"{served}/static/ui.js").text
    assert "new EventSource(url)" in script
