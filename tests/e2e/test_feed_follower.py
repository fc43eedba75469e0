"""The feed's eventsourcing follower (``examples/feed_follower.py``) as a real process,
SIGKILLed mid-stream while runs are written and started again: it ends with exactly the
events of the log, each once (docs/feed.md, "An eventsourcing follower")."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from examples import feed_follower
from flowforge.app.service import FlowForge
from tests.helpers import one_task, wait_until, work

ROOT = Path(__file__).resolve().parents[2]
RUNS = 40
#: Far above the time it takes; the server's horizon can hold a feed back for a while
#: (tests/integration/test_feed.py, FEED_DEADLINE_S).
DEADLINE_S = 300.0


def start_follower(board: Path, url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "examples.feed_follower", "--board", str(board)],
            cwd=ROOT,
            env={**os.environ, "FLOWFORGE_DATABASE_URL": url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_until(lambda: "following" in log.read_text(), DEADLINE_S, "the follower never started")
    return process


def board_events(board: Path) -> int:
    """How many events the follower's own store holds (its board's), read beside it."""
    if not board.exists():
        return 0
    with sqlite3.connect(board, timeout=30) as conn:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'stored_events'"
        ).fetchone()
        return (
            int(conn.execute("SELECT count(*) FROM stored_events").fetchone()[0]) if exists else 0
        )


def test_a_follower_killed_mid_stream_and_restarted_ends_with_exactly_the_logs_events(
    pg_app: FlowForge, postgres_url: str, tmp_path: Path
) -> None:
    app = pg_app
    board, log = tmp_path / "board.db", tmp_path / "follower.log"
    log.touch()
    written = threading.Event()

    def write() -> None:
        for _ in range(RUNS):
            run_id = app.start_workflow_run(one_task())
            work(app, run_id, "only")
        written.set()

    follower = start_follower(board, postgres_url, log)
    writer = threading.Thread(target=write, name="writer")
    writer.start()
    try:
        wait_until(lambda: board_events(board) >= 40, DEADLINE_S, "the follower applied nothing")
        follower.send_signal(signal.SIGKILL)
        assert follower.wait(DEADLINE_S) == -signal.SIGKILL
        killed_at = board_events(board)
        follower = start_follower(board, postgres_url, log)
        writer.join(DEADLINE_S)
        assert written.is_set(), "the writer never finished"
        logged = app.events.recorder.select_notifications(start=None, limit=1_000_000)
        # Its board: one Started event, then one event per FlowForge event.
        wait_until(
            lambda: board_events(board) >= len(logged) + 1,
            DEADLINE_S,
            "the restarted follower never caught up",
        )
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(DEADLINE_S) == 0, log.read_text()
    finally:
        if follower.poll() is None:
            follower.kill()
        writer.join(DEADLINE_S)
    assert killed_at < len(logged) + 1, "the kill came after the follower had caught up"
    reader = feed_follower.open_follower(str(board))
    try:
        applied = reader.applied_keys()
    finally:
        reader.close()
    expected = [f"{e.originator_id}/{e.originator_version}" for e in logged]
    assert len(applied) == len(set(applied)) == len(expected)
    assert sorted(applied) == sorted(expected)
