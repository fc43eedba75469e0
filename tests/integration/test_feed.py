"""The feed (``FlowForge.feed``, ``follow``; docs/feed.md) on both backends: every event
of the log exactly once, in an order no later commit can precede, resumable by position;
a position older than the log's oldest event refused as archived; and, on PostgreSQL,
transactions committed out of order on purpose neither skipped nor repeated."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge import errors
from flowforge.app.feed import FeedEvent, parse_position
from flowforge.app.service import FlowForge
from tests.helpers import LEASE_S, task_id, wait_until, work

CHAIN = {
    "name": "chain",
    "tasks": [
        {"key": "extract", "type": "work"},
        {"key": "load", "type": "work", "depends_on": ["extract"]},
    ],
}
PAIR = {"name": "pair", "tasks": [{"key": "a", "type": "work"}, {"key": "b", "type": "work"}]}
#: How long a test waits for the feed to pass an event: far above the time it takes. The
#: horizon is the server's (docs/feed.md): a transaction another client holds open on
#: any database of the shared server holds every feed back until it ends (seen: over a
#: minute, another bench's), which is the guarantee working, not a failure.
FEED_DEADLINE_S = 300.0


@pytest.fixture(params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest) -> tuple[FlowForge, str]:
    """The service on each backend, with its database URL (to act as an archive would)."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return request.getfixturevalue("pg_app"), url
    url = request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("sqlite_app"), url


def execute(url: str, *statements: str) -> None:
    """Statements run outside FlowForge, as another tool (an archiver) would."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def logged(app: FlowForge) -> list[tuple[UUID, int]]:
    """Every event of the log, as the library's own recorder reads it."""
    rows = app.events.recorder.select_notifications(start=None, limit=1_000_000)
    return [(UUID(str(row.originator_id)), row.originator_version) for row in rows]


def keys(events: list[FeedEvent]) -> list[tuple[UUID, int]]:
    return [(event.aggregate_id, event.version) for event in events]


def everything(app: FlowForge, after: str | None = None) -> list[FeedEvent]:
    """The feed after ``after``, once it has passed every event of the log."""
    total = len(logged(app))
    seen: list[FeedEvent] = []

    def read_on() -> bool:
        seen.extend(app.feed(after=seen[-1].position if seen else None, limit=1000))
        return len(seen) >= total

    wait_until(read_on, FEED_DEADLINE_S, "the feed never reached the end of the log")
    start = parse_position(after)
    return [event for event in seen if parse_position(event.position) > start]


def test_the_feed_returns_every_event_once_in_order_and_resumes_after_a_position(
    backend: tuple[FlowForge, str],
) -> None:
    app, _ = backend
    run_id = app.start_workflow_run(CHAIN)
    work(app, run_id, "extract")
    work(app, run_id, "load", outcome="fail")
    feed = everything(app)

    assert sorted(keys(feed)) == sorted(logged(app))
    assert len(set(keys(feed))) == len(feed)
    positions = [parse_position(event.position) for event in feed]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Each aggregate's events in version order: a total order consistent with the log.
    for aggregate in {event.aggregate_id for event in feed}:
        versions = [e.version for e in feed if e.aggregate_id == aggregate]
        assert versions == sorted(versions)
    # Page by page, resuming after each page's last position: the same sequence.
    paged: list[FeedEvent] = []
    while page := app.feed(after=paged[-1].position if paged else None, limit=2):
        paged += page
    assert paged == feed
    assert app.feed(after=feed[-1].position) == []
    assert app.feed_head() == feed[-1].position


def test_a_feed_event_says_run_task_attempt_transition_actor_and_time(
    backend: tuple[FlowForge, str],
) -> None:
    app, _ = backend
    run_id = app.start_workflow_run(CHAIN)
    work(app, run_id, "extract", outcome="fail")
    feed = everything(app)
    by_edge = {(e.task_key, e.transition): e for e in feed}

    failed = by_edge["extract", "fail"]
    assert failed.run_id == run_id and failed.task_run_id == task_id(app, run_id, "extract")
    assert (failed.attempt, failed.source, failed.target) == (1, "running", "failed")
    assert failed.actor == "worker" and failed.error is not None
    assert failed.error["message"] == "extract failed"
    claimed = by_edge["extract", "claim"]
    assert claimed.actor == "test-worker" and claimed.at <= failed.at
    created = by_edge[None, "create"]
    assert (created.run_id, created.aggregate, created.task_run_id) == (
        run_id,
        "WorkflowRun",
        None,
    )


@pytest.mark.parametrize("token", ["", "12", "1.x", "-1.2", "1.2.3", "99999999999999999999.1"])
def test_a_malformed_position_is_refused_naming_it(
    backend: tuple[FlowForge, str], token: str
) -> None:
    app, _ = backend
    with pytest.raises(errors.InvalidFeedPositionError, match="is not a feed position"):
        app.feed(after=token)


def test_a_limit_out_of_bounds_is_refused_before_any_read(backend: tuple[FlowForge, str]) -> None:
    app, _ = backend
    for limit in (0, -1, 100_001):
        with pytest.raises(ValueError, match="limit must be a whole number"):
            app.feed(limit=limit)


def test_a_position_older_than_the_oldest_event_left_is_refused_as_archived_naming_where(
    backend: tuple[FlowForge, str],
) -> None:
    app, url = backend
    old_run = app.start_workflow_run(CHAIN)
    read = everything(app)
    resume_at = read[0].position  # a follower that has read only the run's creation
    app.start_workflow_run(CHAIN)
    # An archive moves the old run's events out of the log (issue 47).
    table = "flowforge_events" if url.startswith("postgres") else "stored_events"
    ids = [str(old_run), *(str(t.id) for t in app.task_runs(old_run))]
    if table == "stored_events":
        ids = [UUID(i).hex for i in ids]
    quoted = ", ".join(f"'{i}'" for i in ids)
    execute(url, f"DELETE FROM {table} WHERE originator_id IN ({quoted})")

    with pytest.raises(errors.FeedPositionArchivedError, match=r"were archived\. Restore") as exc:
        app.feed(after=resume_at)
    assert exc.value.position == resume_at and exc.value.where == []
    execute(
        url,
        "INSERT INTO archived_runs (workflow_run_id, workflow_name, archive_file, "
        f"archived_at, event_count, task_count) VALUES ('{old_run}', 'w', "
        "'/var/archive/2026-11.ffar', CURRENT_TIMESTAMP, 1, 0)",
    )
    try:
        with pytest.raises(errors.FeedPositionArchivedError, match="archived to /var/archive/"):
            app.feed(after=resume_at)
    finally:
        execute(url, "DELETE FROM archived_runs")
    # Without a position a consumer starts from the oldest event left.
    assert everything(app)[0].run_id != old_run


def test_a_follower_sees_each_event_as_it_commits_and_stops_when_asked(
    backend: tuple[FlowForge, str],
) -> None:
    app, _ = backend
    start = app.feed_head()
    stop = threading.Event()
    seen: list[FeedEvent] = []

    def follow() -> None:
        seen.extend(app.follow(after=start, stop=stop, poll_s=0.05))

    follower = threading.Thread(target=follow, name="follower")
    follower.start()
    try:
        run_id = app.start_workflow_run(CHAIN)
        wait_until(lambda: len(seen) >= 3, FEED_DEADLINE_S, "the run's creation never came")
        work(app, run_id, "extract")
        wait_until(
            lambda: any(e.transition == "succeed" for e in seen),
            FEED_DEADLINE_S,
            "the success never came",
        )
    finally:
        stop.set()
        follower.join(FEED_DEADLINE_S)
    assert not follower.is_alive(), "the follower did not stop"
    assert keys(seen) == keys(everything(app, after=start))


# --- out of order on purpose (PostgreSQL: commits in another order than ids) -------------


@pytest.fixture
def held_open(pg_app: FlowForge) -> Iterator[dict[str, Any]]:
    """A claim whose transaction stays open until the test lets it commit."""
    release = threading.Event()
    claimed = threading.Event()
    state: dict[str, Any] = {"release": release, "claimed": claimed}

    def hold(task_run_id: UUID) -> None:
        try:
            with pg_app.store.write() as writes:
                assert writes.tasks.claim(task_run_id, "slow-worker", LEASE_S) is not None
                claimed.set()  # its event is in the table, not committed
                assert release.wait(FEED_DEADLINE_S)
        except BaseException as exc:
            state["error"] = exc
            claimed.set()

    state["hold"] = hold
    yield state
    release.set()


def test_a_transaction_committing_after_a_later_one_is_neither_skipped_nor_repeated(
    pg_app: FlowForge, held_open: dict[str, Any]
) -> None:
    app = pg_app
    run_id = app.start_workflow_run(PAIR)
    before = everything(app)
    start = before[-1].position
    slow = threading.Thread(target=held_open["hold"], args=(task_id(app, run_id, "a"),))
    slow.start()
    try:
        assert held_open["claimed"].wait(FEED_DEADLINE_S) and "error" not in held_open
        # A later transaction claims b and commits while a's claim is still open.
        assert app.claim_task_run(task_id(app, run_id, "b"), "fast-worker", LEASE_S)
        b_claim = (task_id(app, run_id, "b"), 2)
        # The library's own reader (notification id order) already passes b's claim,
        # whose notification id is after a's: a follower of it would skip a's for good.
        by_id = app.events.recorder.select_notifications(start=None, limit=1000)
        assert (by_id[-1].originator_id, by_id[-1].originator_version) == b_claim
        # The feed does not: b's claim waits behind the open transaction.
        mid = app.feed(after=start)
        assert mid == []
    finally:
        held_open["release"].set()
        slow.join(FEED_DEADLINE_S)
    assert "error" not in held_open
    after = everything(app, after=start)
    claims = [(e.task_key, e.actor) for e in after if e.transition == "claim"]
    assert claims == [("a", "slow-worker"), ("b", "fast-worker")]
    assert sorted(keys(before + after)) == sorted(logged(app))
    assert len(set(keys(before + after))) == len(before + after)


def test_a_follower_across_out_of_order_commits_gets_every_event_once(
    pg_app: FlowForge, held_open: dict[str, Any]
) -> None:
    app = pg_app
    run_id = app.start_workflow_run(PAIR)
    start = app.feed_head()
    stop = threading.Event()
    seen: list[FeedEvent] = []
    follower = threading.Thread(
        target=lambda: seen.extend(app.follow(after=start, stop=stop, poll_s=0.05))
    )
    follower.start()
    slow = threading.Thread(target=held_open["hold"], args=(task_id(app, run_id, "a"),))
    slow.start()
    try:
        assert held_open["claimed"].wait(FEED_DEADLINE_S) and "error" not in held_open
        claim_b = app.claim_task_run(task_id(app, run_id, "b"), "fast-worker", LEASE_S)
        assert claim_b is not None
        assert app.finish_task_run(claim_b.task_run_id, claim_b.fencing_token, "succeed")
        held_open["release"].set()
        slow.join(FEED_DEADLINE_S)
        total = len(everything(app, after=start))
        wait_until(lambda: len(seen) >= total, FEED_DEADLINE_S, "the follower fell behind")
    finally:
        held_open["release"].set()
        stop.set()
        follower.join(FEED_DEADLINE_S)
    assert keys(seen) == keys(everything(app, after=start))
    assert len(set(keys(seen))) == len(seen)
    assert ("a", "claim") in [(e.task_key, e.transition) for e in seen]
