"""The feed: every event of the log, in one order, read by position (docs/feed.md).

``feed(after=position, limit=n)`` returns the events after a position, each with its own;
``follow(after=position, stop=...)`` yields them as they commit, woken by the store's
bells (PostgreSQL's LISTEN; this process's commits on SQLite) and polling between. A
position is an opaque token (``"TRANSACTION.NOTIFICATION"``): a consumer stores the one
of the last event it has acted on and resumes after it. Within a position the feed never
skips and never repeats an event: it reads only below the oldest transaction still
running (``projections/feed.py``, ``sql/feed.sql``), so no event can commit before a
position once a page has passed it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from flowforge import bounds, errors
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app import audit
from flowforge.app.core import ServiceCore
from flowforge.projections import feed as store_feed

#: How often a follower looks at the log when nothing woke it (a claim or a heartbeat
#: rings no bell: it is seen at the next look).
FOLLOW_POLL_S = 1.0
#: How soon a follower looks again when committed events wait behind a transaction that
#: is still running (they become readable when it ends).
HELD_BACK_RETRY_S = 0.05
#: How often a waiting follower checks its stop.
STOP_CHECK_S = 0.2
#: Events one page returns unless asked (at most ``bounds.MAX_ROWS``).
DEFAULT_PAGE = 500

_POSITION = re.compile(r"^(\d{1,19})\.(\d{1,19})$")


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One transition as the feed gives it: where it is in the feed (``position``: resume
    after it), its run, task and attempt, the edge, who took it and when."""

    position: str
    run_id: UUID | None
    task_key: str | None
    task_run_id: UUID | None
    attempt: int | None
    transition: str
    source: str | None
    target: str
    actor: str
    at: datetime
    #: The aggregate the event belongs to (``WorkflowRun``, ``TaskRun``, ``Schedule``,
    #: ...), its id and the event's version of it.
    aggregate: str
    aggregate_id: UUID
    version: int
    #: A failed attempt's error, as the event recorded it.
    error: dict[str, str] | None = None


class StopSignal(Protocol):
    """What ends a follow: a ``threading.Event`` (or the processes' ``Stop``)."""

    def is_set(self) -> bool: ...


def position_token(position: store_feed.Position) -> str:
    return f"{position[0]}.{position[1]}"


def parse_position(token: str | None) -> store_feed.Position:
    """A position token as the store's pair; ``None`` is the start."""
    if token is None:
        return store_feed.START
    match = _POSITION.match(token.strip())
    if match is None:
        raise errors.InvalidFeedPositionError(
            f"{token!r} is not a feed position: give one the feed printed "
            f"(TRANSACTION.NOTIFICATION, e.g. 812.4031), or none to start from the "
            f"beginning"
        )
    return (int(match.group(1)), int(match.group(2)))


class Feed:
    """The service's feed part (``FlowForge.feed``, ``follow``, ``feed_head``)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        #: Task keys of task runs whose rows are gone (their creation event names them).
        self._task_keys: dict[UUID, tuple[UUID, str]] = {}

    def feed(self, after: str | None = None, limit: int = DEFAULT_PAGE) -> list[FeedEvent]:
        """At most ``limit`` events after the position ``after`` (none: from the oldest
        event in the log), in the feed's order. Raises ``FeedPositionArchivedError`` if
        ``after`` is older than the oldest event still in the log."""
        events, _held = self._page(after, limit)
        return events

    def feed_head(self) -> str:
        """The position of the newest event a feed can return now: a follower that starts
        there sees only what commits from now on."""
        with self._core.reads() as reads:
            return position_token(reads.feed_head())

    def follow(
        self,
        after: str | None = None,
        *,
        stop: StopSignal,
        poll_s: float = FOLLOW_POLL_S,
        batch: int = DEFAULT_PAGE,
    ) -> Iterator[FeedEvent]:
        """Every event after ``after`` as it commits, until ``stop`` is set (checked
        between events and while waiting). Resume a follower with the ``position`` of
        the last event it has acted on."""
        position = after
        with self._core.listening() as wakeups, wakeups.either() as bell:
            while not stop.is_set():
                events, held_back = self._page(position, batch)
                for event in events:
                    yield event
                    position = event.position
                    if stop.is_set():
                        return
                if len(events) == batch:
                    continue
                _wait(bell, HELD_BACK_RETRY_S if held_back else poll_s, stop)

    def _page(self, after: str | None, limit: int) -> tuple[list[FeedEvent], bool]:
        bounds.row_limit(limit)
        start = parse_position(after)
        with self._core.reads() as reads:
            page = reads.feed_page(start, limit)
            # The start ("0.0", the head of an empty log) precedes every event ever.
            if page.oldest is not None and store_feed.START < start < page.oldest:
                where = reads.archive_locations()
                raise errors.FeedPositionArchivedError(
                    position_token(start), position_token(page.oldest), where
                )
        return [self._event(row) for row in page.rows], page.held_back

    def _event(self, row: store_feed.FeedRow) -> FeedEvent:
        decoded = self._core.events.mapper.to_domain_event(row.stored)
        position = position_token(row.position)
        run_id, task_key = self._run_and_key(decoded, row)
        try:
            entry = audit.entry(decoded, task_key)
        except TypeError:  # another aggregate's event (a schedule, a limit)
            return _other(decoded, position)
        is_task = entry.aggregate == "TaskRun"
        return FeedEvent(
            position=position,
            run_id=run_id,
            task_key=entry.task_key,
            task_run_id=entry.aggregate_id if is_task else None,
            attempt=entry.attempt,
            transition=entry.transition,
            source=entry.source,
            target=entry.target,
            actor=entry.actor,
            at=entry.at,
            aggregate=entry.aggregate,
            aggregate_id=entry.aggregate_id,
            version=entry.version,
            error=entry.error,
        )

    def _run_and_key(
        self, event: object, row: store_feed.FeedRow
    ) -> tuple[UUID | None, str | None]:
        if isinstance(event, WorkflowRun.Event):
            return event.originator_id, None
        if isinstance(event, TaskRun.Created):
            self._task_keys[event.originator_id] = (event.workflow_run_id, event.task_key)
            return event.workflow_run_id, event.task_key
        if isinstance(event, TaskRun.Event):
            if row.workflow_run_id is not None:
                return row.workflow_run_id, row.task_key
            known = self._task_keys.get(event.originator_id)
            return known if known is not None else (None, None)
        return None, None


def _other(event: Any, position: str) -> FeedEvent:
    """An event of an aggregate that is neither a run nor a task."""
    name = type(event).__qualname__
    aggregate, _, kind = name.rpartition(".")
    return FeedEvent(
        position=position,
        run_id=None,
        task_key=None,
        task_run_id=None,
        attempt=None,
        transition=getattr(event, "TRANSITION", "") or kind.lower(),
        source=getattr(event, "source", None),
        target=str(getattr(event, "state", "")),
        actor=str(getattr(event, "actor", "")),
        at=event.timestamp,
        aggregate=aggregate or name,
        aggregate_id=event.originator_id,
        version=event.originator_version,
    )


def _wait(bell: Any, seconds: float, stop: StopSignal) -> None:
    """Until the bell rings, ``seconds`` pass, or ``stop`` is set."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or bell.wait(min(left, STOP_CHECK_S)):
            return
