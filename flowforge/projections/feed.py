"""The feed's reads: pages of the event log in an order no later commit can precede.

The statements are ``sql/feed.sql`` with each dialect's macros ("the feed" in
``postgres.sql`` and ``sqlite.sql``); docs/feed.md states the guarantee and its proof
sketch. A position is a pair ``(transaction, notification)``: the id of the
transaction that wrote the event (PostgreSQL; 0 on SQLite, whose rowid order is its
commit order) and the event's place in the library's table.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from flowforge.projections.db.protocols import Row, Transaction

#: A position in the feed: ``(transaction id, notification id)``; ``(0, 0)`` is before
#: every event.
Position = tuple[int, int]
START: Position = (0, 0)


@dataclass(frozen=True, slots=True)
class FeedRow:
    """One event of the feed, with its position and, for a task's event, its run and
    key (from its row: ``None`` once the row is gone)."""

    position: Position
    stored: StoredEvent
    workflow_run_id: UUID | None
    task_key: str | None


@dataclass(frozen=True, slots=True)
class FeedPage:
    """A page of the feed after a position: its rows; whether committed events wait above
    the horizon (look again soon); the oldest position still in the log (``None``: the
    log is empty)."""

    rows: list[FeedRow]
    held_back: bool
    oldest: Position | None


def page(tx: Transaction, after: Position, limit: int) -> FeedPage:
    """At most ``limit`` events after ``after``, in one round trip."""
    params = {"transaction_id": after[0], "notification_id": after[1], "limit": limit}
    rows, held, oldest = tx.run_each(
        [("feed_select", params), ("feed_held_back", params), ("feed_oldest", None)]
    )
    return FeedPage(
        rows=[_feed_row(row) for row in rows],
        held_back=bool(held),
        oldest=_position(oldest[0]) if oldest else None,
    )


def head(tx: Transaction) -> Position:
    """The newest position every event at or before which is final."""
    rows = tx.run("feed_head")
    return _position(rows[0]) if rows else START


def archive_locations(tx: Transaction) -> list[str]:
    """The archive files ``flowforge db archive`` wrote runs to (``archived_runs``)."""
    return [str(row["archive_file"]) for row in tx.run("feed_archive_locations")]


def _position(row: Row) -> Position:
    return (int(row["transaction_id"]), int(row["notification_id"]))


def _feed_row(row: Row) -> FeedRow:
    return FeedRow(
        position=_position(row),
        stored=StoredEvent(
            originator_id=row["originator_id"],
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=bytes(row["state"]),
        ),
        workflow_run_id=row["workflow_run_id"],
        task_key=row["task_key"],
    )
