"""How soon the web UI's pages hear of a change (docs/ui.md, "Live updates").

    python -m bench.ui_live [--changes 20]

For each backend (PostgreSQL: a fresh database ``bench_ui_live``; SQLite: a file in a
temporary directory), serves the UI in a thread (``flowforge.ui.server.serving``), opens
its event stream (``/events``) as a page does, then commits ``--changes`` changes one at a
time from the same process and times each from its commit to the stream's ``change``
event: a new run (its dispatch rings a bell: on PostgreSQL a notification) and a claim
(which rings none: the UI's poll finds it). Prints the median and the largest of each.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx

from bench.end_to_end import database_url, drop_database, recreate_database
from flowforge.app.service import FlowForge
from flowforge.ui.server import serving

DATABASE = "bench_ui_live"
ONE = {"name": "one", "tasks": [{"key": "a", "type": "t"}]}


def heard(url: str, arrivals: queue.Queue[float], connected: threading.Event) -> None:
    """Put the time of each ``change`` event the stream sends."""
    with httpx.stream("GET", f"{url}/events", timeout=None) as response:
        connected.set()
        for line in response.iter_lines():  # ends when the server stops
            if line == "event: change":
                arrivals.put(time.perf_counter())


def latencies(app: FlowForge, changes: int) -> Iterator[tuple[str, float]]:
    """(kind, seconds from commit to event) of each change."""
    with serving(app) as url:
        arrivals: queue.Queue[float] = queue.Queue()
        connected = threading.Event()
        threading.Thread(target=heard, args=(url, arrivals, connected), daemon=True).start()
        connected.wait(10)
        for _ in range(changes):
            for kind, commit in _changes(app):
                time.sleep(0.6)  # past the UI's second look at the previous change
                while not arrivals.empty():
                    arrivals.get_nowait()
                began = time.perf_counter()
                commit()
                yield kind, arrivals.get(timeout=10) - began


def _changes(app: FlowForge) -> list[tuple[str, Callable[[], object]]]:
    made: list[object] = []

    def new_run() -> None:
        made.append(app.start_workflow_run(ONE))

    def claim() -> None:
        (task,) = app.task_runs(made[-1])  # type: ignore[arg-type]
        assert app.claim_task_run(task.id, "bench", 30) is not None

    return [("a new run (rings a bell)", new_run), ("a claim (rings none)", claim)]


def report(backend: str, measured: list[tuple[str, float]]) -> None:
    for kind in dict.fromkeys(k for k, _ in measured):
        seconds = [s for k, s in measured if k == kind]
        print(
            f"{backend:10} {kind:26} median {statistics.median(seconds) * 1000:6.1f} ms, "
            f"largest {max(seconds) * 1000:6.1f} ms ({len(seconds)} changes)"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_live")
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args(argv)
    recreate_database(DATABASE)
    try:
        app = FlowForge(database_url(DATABASE), migrate=True)
        try:
            report("PostgreSQL", list(latencies(app, args.changes)))
        finally:
            app.close()
    finally:
        drop_database(DATABASE)
    with tempfile.TemporaryDirectory() as directory:
        app = FlowForge(f"sqlite:///{Path(directory) / 'flowforge.db'}", migrate=True)
        try:
            report("SQLite", list(latencies(app, args.changes)))
        finally:
            app.close()


if __name__ == "__main__":
    main()
