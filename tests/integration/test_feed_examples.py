"""The feed's examples, run as docs/feed.md shows them, on both backends: the
``eventsourcing`` follower keeps a projection equal to FlowForge's rows and resumes at its
own position; the webhook consumer posts each failed run once to a local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from examples import failed_runs_webhook, feed_follower
from flowforge.app.feed import parse_position
from flowforge.app.service import FlowForge
from tests.helpers import one_task, wait_until, work

#: Far above the time it takes; the server's horizon can hold a feed back for a while
#: (tests/integration/test_feed.py, FEED_DEADLINE_S).
FEED_DEADLINE_S = 300.0


def finished_runs(app: FlowForge, outcomes: list[str]) -> list[Any]:
    """One one-task run per outcome, worked to its end (``fail``: the run fails)."""
    runs = []
    for outcome in outcomes:
        run_id = app.start_workflow_run(one_task(retry={"max_attempts": 1}))
        work(app, run_id, "only", outcome=outcome)
        app.schedule_once()
        runs.append(run_id)
    return runs


def test_the_eventsourcing_follower_projects_the_runs_and_resumes_at_its_own_position(
    app: FlowForge, tmp_path: Path
) -> None:
    board_file = str(tmp_path / "board.db")
    first = finished_runs(app, ["succeed", "fail"])
    follower = feed_follower.open_follower(board_file)
    try:
        wait_until(
            lambda: feed_follower.catch_up(app, follower).runs.get(str(first[1])) == "failed",
            FEED_DEADLINE_S,
            "the follower never saw the failed run",
        )
    finally:
        follower.close()
    second = finished_runs(app, ["succeed"])
    # A new process of the follower: its position and projection come from its own store.
    follower = feed_follower.open_follower(board_file)
    try:
        boards: list[feed_follower.RunBoard] = []

        def caught_up() -> bool:
            boards.append(feed_follower.catch_up(app, follower))
            return boards[-1].runs.get(str(second[0])) == "succeeded"

        wait_until(caught_up, FEED_DEADLINE_S, "the follower never saw the later run")
        board = boards[-1]
        applied = follower.applied_keys()
    finally:
        follower.close()
    rows = {str(run.id): run.state for run in app.recent_runs(100)}
    assert board.runs == rows
    log = app.events.recorder.select_notifications(start=None, limit=1_000_000)
    assert sorted(applied) == sorted(f"{e.originator_id}/{e.originator_version}" for e in log)
    assert len(set(applied)) == len(applied) == board.applied


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, Any], str | None]]
    refuse_next = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).refuse_next:
            type(self).refuse_next -= 1
            self.send_response(503)
        else:
            self.received.append((body, self.headers["Idempotency-Key"]))
            self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[_Hook]]]:
    """A local HTTP server recording each POST (its handler class holds them)."""
    hook = type("Hook", (_Hook,), {"received": [], "refuse_next": 0})
    server = HTTPServer(("127.0.0.1", 0), hook)
    thread = threading.Thread(target=server.serve_forever, name="webhook")
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", hook
    server.shutdown()
    thread.join()
    server.server_close()


def test_the_webhook_consumer_posts_each_failed_run_once_retrying_a_refusal(
    app: FlowForge, tmp_path: Path, webhook: tuple[str, type[_Hook]], monkeypatch: Any
) -> None:
    url, hook = webhook
    hook.refuse_next = 1  # the first POST is refused: the same run is posted again
    monkeypatch.setattr(failed_runs_webhook, "RETRY_S", 0.05)
    state = tmp_path / "hook.pos"
    stop = threading.Event()
    posted: list[int] = []
    consumer = threading.Thread(
        target=lambda: posted.append(
            failed_runs_webhook.consume(app, url, state, stop, poll_s=0.05)
        )
    )
    consumer.start()
    try:
        failed, _ok, failed_too = finished_runs(app, ["fail", "succeed", "fail"])
        wait_until(lambda: len(hook.received) >= 2, FEED_DEADLINE_S, "no posts arrived")
    finally:
        stop.set()
        consumer.join(FEED_DEADLINE_S)
    assert posted == [2]
    assert [(body["run_id"], key) for body, key in hook.received] == [
        (str(failed), str(failed)),
        (str(failed_too), str(failed_too)),
    ]
    # Restarted from its saved position, it goes on after it: a later run's events are
    # read, and neither failed run is posted again.
    stop = threading.Event()
    consumer = threading.Thread(
        target=lambda: posted.append(
            failed_runs_webhook.consume(app, url, state, stop, poll_s=0.05)
        )
    )
    consumer.start()
    try:
        finished_runs(app, ["succeed"])
        head = parse_position(app.feed_head())
        wait_until(
            lambda: parse_position(state.read_text()) >= head,
            FEED_DEADLINE_S,
            "the restarted consumer never caught up",
        )
    finally:
        stop.set()
        consumer.join(FEED_DEADLINE_S)
    assert posted == [2, 0]
    assert len(hook.received) == 2
