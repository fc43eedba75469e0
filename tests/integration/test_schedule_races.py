"""A schedule's delete racing its pause or resume, on both backends, released together by
a ``threading.Barrier`` (docs/scheduling/cron.md, "Pause, resume, delete"): the
database decides, so the end is one of the serial orders' (a schedule is deletable
active or paused, so every serial order ends deleted, the delete having won), and the
audit log, replayed, agrees with the row."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest

from flowforge import errors
from flowforge.aggregates.cron_schedule import Schedule
from flowforge.app.service import FlowForge
from tests.helpers import race, wait_until
from tests.integration.test_contract import DirectDatabase
from tests.integration.test_schedules import HOURLY, WORKFLOW, _events
from tests.integration.test_wakeups import WAIT_S

ROUNDS = 12


@pytest.fixture
def racers(app: FlowForge, request: pytest.FixtureRequest) -> Iterator[list[FlowForge]]:
    """Two more services on the fixture's database, each with its own connections."""
    url = request.getfixturevalue(
        "postgres_url" if app.database.dialect == "postgres" else "sqlite_url"
    )
    apps = [FlowForge(url, migrate=False) for _ in range(2)]
    yield apps
    for each in apps:
        each.close()


def answer(call: Any) -> Any:
    """What a racer's command answered: its result, or the error it raised."""
    try:
        return call()
    except errors.UnknownScheduleError as exc:
        return type(exc)


@pytest.mark.parametrize("other", ["pause", "resume"])
def test_a_delete_racing_a_pause_or_resume_ends_deleted_with_a_log_that_agrees(
    app: FlowForge, racers: list[FlowForge], request: pytest.FixtureRequest, other: str
) -> None:
    url = request.getfixturevalue(
        "postgres_url" if app.database.dialect == "postgres" else "sqlite_url"
    )
    direct = DirectDatabase(app.database.dialect, url)
    deleter, mover = racers
    for round_ in range(ROUNDS):
        name = f"{other}{round_}"
        schedule = app.add_schedule(name, HOURLY, WORKFLOW)
        if other == "resume":
            assert app.pause_schedule(name)
        move = mover.pause_schedule if other == "pause" else mover.resume_schedule

        deleted, moved = race(
            partial(answer, partial(deleter.delete_schedule, name)),
            partial(answer, partial(move, name)),
        )

        # Serially: the move then the delete (True, True), or the delete then the move
        # (True, and the move finds no live schedule). Never a delete that lost.
        assert deleted is True, f"round {round_}: the delete lost to the {other}"
        assert moved in (True, errors.UnknownScheduleError), f"round {round_}: {moved}"
        ((state, version),) = direct.execute(
            "SELECT state, version FROM schedules WHERE name = %(name)s", {"name": name}
        )
        assert state == "deleted"
        events = _events(app, schedule.id)
        names = [type(e).__name__ for e in events]
        assert len(events) == version == (3 if moved is True else 2) + (other == "resume")
        assert names[-1] in ("Deleted", "PausedDeleted"), names
        replayed: Schedule = app.events.repository.get(schedule.id)
        assert (replayed.state.value, replayed.version) == (state, version)


def test_a_delete_waiting_on_a_resume_in_flight_deletes_the_resumed_schedule(
    pg_app: FlowForge, postgres_url: str
) -> None:
    """The interleaving the race above meets only now and then, made to happen: a
    resume holds the paused schedule's row (a transaction of its own, by hand) while
    the delete runs into it; the resume commits; the delete must then delete the
    schedule, now active (trying each edge's write in turn matched neither: `delete`
    read it paused, `delete_paused` found it active)."""
    pg_app.add_schedule("held", HOURLY, WORKFLOW)
    assert pg_app.pause_schedule("held")
    result: list[bool] = []
    with psycopg.connect(postgres_url) as resume:
        resume.execute(
            "UPDATE schedules SET state = 'active', next_fire_at = now() + interval '1 hour'"
            " WHERE name = 'held'"
        )
        deleter = threading.Thread(target=lambda: result.append(pg_app.delete_schedule("held")))
        deleter.start()
        wait_until(lambda: waiting_for_a_lock(postgres_url), WAIT_S, "the delete never waited")
        resume.commit()
    deleter.join(WAIT_S)

    assert result == [True]
    assert DirectDatabase("postgres", postgres_url).execute(
        "SELECT state FROM schedules WHERE name = 'held'"
    ) == [("deleted",)]


def waiting_for_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] > 0
