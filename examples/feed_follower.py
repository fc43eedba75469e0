"""An ``eventsourcing`` application that follows FlowForge's feed (docs/feed.md, "An
eventsourcing follower").

The follower is an application of its own, with its own event store (a SQLite file,
``--board``): one aggregate, :class:`RunBoard`, is its projection of FlowForge's runs
(each run's state, each task's last transition) and holds the feed position of the last
FlowForge event it applied. Each FlowForge event becomes one ``TransitionApplied`` event
of the board, saved by the library in one transaction with the position it carries: the
projection and the position can never disagree, so a follower killed at any moment
resumes exactly after the last event it saved, as the library's process applications do
with their tracking records. Two followers of one board cannot both save: the library's
optimistic concurrency refuses the second.

    python -m examples.feed_follower --board board.db               # follow until Ctrl-C
    python -m examples.feed_follower --board board.db --until-idle  # catch up, then exit

FlowForge's database is ``FLOWFORGE_DATABASE_URL`` (or ``--database-url``).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate, event

from flowforge import FlowForge
from flowforge.app.feed import FeedEvent

#: The board's id: one board per follower's store.
BOARD_ID = uuid5(NAMESPACE_URL, "flowforge:examples:feed_follower:board")


class RunBoard(Aggregate):
    """A projection of FlowForge's runs, and how far into the feed it is."""

    @staticmethod
    def create_id() -> UUID:
        return BOARD_ID

    @event("Started")
    def __init__(self) -> None:
        self.position: str | None = None
        self.runs: dict[str, str] = {}
        self.tasks: dict[str, list[Any]] = {}
        self.applied = 0

    @event("TransitionApplied")
    def apply_transition(
        self,
        position: str,
        key: str,
        run_id: str | None,
        task: str | None,
        transition: str,
        target: str,
        attempt: int | None,
    ) -> None:
        """One FlowForge event (``key``: its aggregate and version, the follower's own
        record of what it applied)."""
        self.position = position
        self.applied += 1
        if run_id is None:
            return
        if task is None:
            self.runs[run_id] = target
        else:
            self.tasks[f"{run_id}/{task}"] = [transition, target, attempt]


class Follower(Application[UUID]):
    """The follower's own eventsourcing application (its store: ``--board``)."""

    name = "FeedFollower"

    def board(self) -> RunBoard:
        try:
            board: RunBoard = self.repository.get(BOARD_ID)
        except AggregateNotFoundError:
            board = RunBoard()
        return board

    def apply(self, board: RunBoard, feed_event: FeedEvent) -> None:
        board.apply_transition(
            position=feed_event.position,
            key=f"{feed_event.aggregate_id}/{feed_event.version}",
            run_id=None if feed_event.run_id is None else str(feed_event.run_id),
            task=feed_event.task_key,
            transition=feed_event.transition,
            target=feed_event.target,
            attempt=feed_event.attempt,
        )
        self.save(board)  # the projection and its position, in one transaction

    def applied_keys(self) -> list[str]:
        """Every FlowForge event the board applied, in order (its own event log)."""
        return [
            e.key
            for e in self.events.get(BOARD_ID)
            if isinstance(e, RunBoard.TransitionApplied)  # type: ignore[attr-defined]
        ]


def open_follower(board_path: str) -> Follower:
    return Follower(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": board_path}
    )


def follow(flowforge: FlowForge, follower: Follower, stop: threading.Event) -> RunBoard:
    """Apply every FlowForge event after the board's position until ``stop``."""
    board = follower.board()
    for feed_event in flowforge.follow(after=board.position, stop=stop, poll_s=0.2):
        follower.apply(board, feed_event)
    return board


def catch_up(flowforge: FlowForge, follower: Follower) -> RunBoard:
    """Apply every FlowForge event the feed holds now, then return."""
    board = follower.board()
    while page := flowforge.feed(after=board.position):
        for feed_event in page:
            follower.apply(board, feed_event)
    return board


@contextmanager
def stopped_by_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (the follower finishes the event in hand)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", required=True, help="the follower's own SQLite file")
    parser.add_argument("--database-url", default=os.environ.get("FLOWFORGE_DATABASE_URL"))
    parser.add_argument("--until-idle", action="store_true", help="catch up, then exit")
    args = parser.parse_args()
    follower = open_follower(args.board)
    with FlowForge(args.database_url) as flowforge:
        if args.until_idle:
            board = catch_up(flowforge, follower)
        else:
            print("following", flush=True)
            with stopped_by_signals() as stop:
                board = follow(flowforge, follower, stop)
    print(f"applied {board.applied} events; runs: {sorted(board.runs.values())}")
    print(f"position {board.position}")
    follower.close()


if __name__ == "__main__":
    # Run with -m, this file is __main__; the board's events must name their class by
    # its import path (the library resolves the topic when it reads them back), so the
    # module's own import runs the follower.
    from examples import feed_follower  # noqa: PLW0406 (see above)

    feed_follower.main()
