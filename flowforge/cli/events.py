"""``flowforge events``: the feed (docs/feed.md), one transition per line.

Without ``--follow`` it prints what the log holds after ``--after`` (every event, or the
first ``--limit``) and exits; with it, it goes on printing transitions as they commit
until Ctrl-C. Each line ends with the event's position: ``--after`` that position
resumes exactly after it.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app.feed import FeedEvent
from flowforge.cli import common

#: Events read per page without --follow.
PAGE = 1000


def events(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        if args.follow:
            found: Iterable[FeedEvent] = app.follow(after=args.after, stop=threading.Event())
        else:
            found = _pages(app.feed, args.after)
        for count, event in enumerate(found, start=1):
            print(line_json(event) if args.json else line(event), flush=args.follow)
            if args.limit is not None and count >= args.limit:
                break
    return 0


def _pages(feed: Any, after: str | None) -> Iterator[FeedEvent]:
    while page := feed(after=after, limit=PAGE):
        yield from page
        after = page[-1].position


def line(event: FeedEvent) -> str:
    """One transition: time, run, task (or ``(run)``), attempt, edge, actor, position."""
    run = short_id(event.run_id) if event.run_id is not None else "-"
    task = event.task_key or ("(run)" if event.aggregate == "WorkflowRun" else event.aggregate)
    attempt = "" if event.attempt is None else f"#{event.attempt}"
    return (
        f"{timefmt.iso(event.at)}  {run}  {task:<16} {attempt:>3}  "
        f"{event.transition:<24} {event.actor:<16} {event.position}"
    )


def line_json(event: FeedEvent) -> str:
    """One transition as one JSON object (a line of JSON Lines)."""
    return json.dumps(fact(event), separators=(",", ":"))


def fact(event: FeedEvent) -> dict[str, Any]:
    return {
        "position": event.position,
        "run_id": None if event.run_id is None else str(event.run_id),
        "task": event.task_key,
        "task_run_id": None if event.task_run_id is None else str(event.task_run_id),
        "attempt": event.attempt,
        "transition": event.transition,
        "source": event.source,
        "target": event.target,
        "actor": event.actor,
        "at": timefmt.iso(event.at),
        "aggregate": event.aggregate,
        "aggregate_id": str(event.aggregate_id),
        "version": event.version,
        "error": event.error,
    }
