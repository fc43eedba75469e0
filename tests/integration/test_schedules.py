"""Cron schedules on both backends (``flowforge/app/cron_schedules.py``): add, list, pause,
resume and delete; a due schedule fires once; the missed-fire policies, with a
controlled clock (``as_of``: no sleeping until a fire time); the scheduler's pass and
timer; the rebuild; and on PostgreSQL, schedulers racing to fire one schedule, released
together by a ``threading.Barrier``, create exactly one run per fire time."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.aggregates import cron_schedule
from flowforge.aggregates.cron import Cron
from flowforge.app.results import ScheduleView
from flowforge.app.scope import EVERY_RUN, Scope
from flowforge.app.service import FlowForge
from flowforge.cli import exits, logs
from flowforge.cli import main as cli_main
from tests.helpers import race, wait_until
from tests.integration.test_contract import DirectDatabase, _NoDatabase

WORKFLOW: dict[str, Any] = {
    "name": "report",
    "tasks": [{"key": "extract", "type": "extract"}, {"key": "load", "type": "load"}],
}
HOURLY = "0 * * * *"


def hour_after(at: datetime, hours: int = 1) -> datetime:
    """The top of the hour ``hours`` after ``at``'s."""
    return at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours)


def runs_of(app: FlowForge, name: str) -> dict[str, UUID]:
    """The runs the schedule created, by idempotency key (its fire time)."""
    prefix = f"{cron_schedule.IDEMPOTENCY_PREFIX}{name}@"
    return {
        run.idempotency_key: run.id
        for run in app.every_run()
        if run.idempotency_key and run.idempotency_key.startswith(prefix)
    }


def fire_times(app: FlowForge, name: str) -> list[datetime]:
    """The fire times the schedule's Fired events record, in order."""
    fired = []
    for event in _events(app, app.get_schedule(name).id):
        if isinstance(event, cron_schedule.Schedule.Fired):
            assert event.last_fire_at is not None
            fired.append(event.last_fire_at)
    return fired


@pytest.fixture
def raw(app: FlowForge, request: pytest.FixtureRequest) -> DirectDatabase:
    """The app's database through the driver, bypassing FlowForge."""
    dialect = app.database.dialect
    url = request.getfixturevalue("postgres_url" if dialect == "postgres" else "sqlite_url")
    return DirectDatabase(dialect, url)


class TestCommands:
    def test_an_added_schedule_is_listed_active_with_its_first_fire_time_after_now(
        self, app: FlowForge
    ) -> None:
        before = app.database_now()
        row = app.add_schedule(
            "nightly", "30 2 * * *", WORKFLOW, {"rows": 8}, timezone="Europe/Paris"
        )
        assert (row.name, row.state, row.cron, row.timezone) == (
            "nightly",
            "active",
            "30 2 * * *",
            "Europe/Paris",
        )
        assert (row.workflow_name, row.inputs, row.catch_up) == ("report", {"rows": 8}, 0)
        assert row.next_fire_at == Cron("30 2 * * *", "Europe/Paris").next_fire_after(
            row.created_at
        )
        assert before < row.next_fire_at <= before + timedelta(days=1, hours=1)
        assert (row.last_fire_at, row.last_run_id) == (None, None)
        assert app.list_schedules() == [row]
        assert app.get_schedule("nightly") == row

    def test_pause_resume_and_delete_take_their_edges_and_say_when_nothing_changed(
        self, app: FlowForge
    ) -> None:
        app.add_schedule("s", HOURLY, WORKFLOW)
        assert app.pause_schedule("s")
        assert (app.get_schedule("s").state, app.get_schedule("s").next_fire_at) == (
            "paused",
            None,
        )
        assert not app.pause_schedule("s")
        assert app.resume_schedule("s")
        resumed = app.get_schedule("s")
        assert resumed.state == "active"
        assert resumed.next_fire_at == hour_after(resumed.updated_at)
        assert not app.resume_schedule("s")
        assert app.delete_schedule("s")
        assert app.list_schedules() == []
        for command in (app.pause_schedule, app.resume_schedule, app.delete_schedule):
            with pytest.raises(errors.UnknownScheduleError, match="no schedule named 's'"):
                command("s")
        transitions = [type(e).__name__ for e in _events(app, resumed.id)]
        assert transitions == ["Created", "Paused", "Resumed", "Deleted"]

    def test_a_paused_schedule_is_deleted_by_the_delete_paused_edge(self, app: FlowForge) -> None:
        row = app.add_schedule("s", HOURLY, WORKFLOW)
        app.pause_schedule("s")
        assert app.delete_schedule("s")
        assert [type(e).__name__ for e in _events(app, row.id)][-1] == "PausedDeleted"

    def test_a_name_in_use_is_refused_and_a_deleted_name_may_be_used_again(
        self, app: FlowForge
    ) -> None:
        old = app.add_schedule("s", HOURLY, WORKFLOW)
        with pytest.raises(errors.ScheduleExistsError, match="a schedule named 's' exists"):
            app.add_schedule("s", "*/5 * * * *", WORKFLOW)
        app.delete_schedule("s")
        new = app.add_schedule("s", "*/5 * * * *", WORKFLOW)
        assert new.id != old.id
        assert app.list_schedules() == [new]

    @pytest.mark.parametrize(
        ("name", "cron", "timezone", "catch_up", "says"),
        [
            ("s", "61 * * * *", "UTC", 0, "bad minute"),
            ("s", "* * *", "UTC", 0, "expected 5 fields"),
            ("s", HOURLY, "Mars/Olympus", 0, "not a known IANA time zone"),
            ("s", HOURLY, "UTC", -1, "catch_up must be from 0"),
            ("two words", HOURLY, "UTC", 0, "schedule name 'two words'"),
            ("", HOURLY, "UTC", 0, "schedule name ''"),
        ],
    )
    def test_a_bad_schedule_is_refused_naming_the_problem_before_any_io(
        self, app: FlowForge, name: str, cron: str, timezone: str, catch_up: int, says: str
    ) -> None:
        real, app.database = app.database, _NoDatabase()
        try:
            with pytest.raises(errors.InvalidScheduleError, match=says):
                app.add_schedule(name, cron, WORKFLOW, timezone=timezone, catch_up=catch_up)
            with pytest.raises(errors.InvalidWorkflowDefinitionError):
                app.add_schedule("s", HOURLY, {"name": "w", "tasks": []})
        finally:
            app.database = real


class TestFiring:
    def test_a_due_schedule_fires_once_and_the_run_is_its_workflow_with_its_inputs(
        self, app: FlowForge
    ) -> None:
        row = app.add_schedule("s", HOURLY, WORKFLOW, {"rows": 8})
        assert row.next_fire_at is not None
        assert app.fire_due_schedules(as_of=row.next_fire_at - timedelta(seconds=1)) == []
        late = row.next_fire_at + timedelta(milliseconds=300)
        (fired,) = app.fire_due_schedules(as_of=late)
        assert (fired.schedule, fired.fire_at) == ("s", row.next_fire_at)
        assert app.fire_due_schedules(as_of=late) == []  # a second pass fires nothing
        run = app.get_workflow_run(fired.run_id)
        assert (run.workflow_name, run.inputs, run.state) == ("report", {"rows": 8}, "pending")
        assert run.idempotency_key == f"schedule:s@{row.next_fire_at:%Y-%m-%dT%H:%M:%SZ}"
        assert [t.task_key for t in app.task_runs(run.id)] == ["extract", "load"]
        after = app.get_schedule("s")
        assert (after.last_fire_at, after.last_run_id) == (row.next_fire_at, run.id)
        assert after.next_fire_at == row.next_fire_at + timedelta(hours=1)
        assert fire_times(app, "s") == [row.next_fire_at]

    def test_after_downtime_the_default_runs_only_the_latest_missed_fire_time(
        self, app: FlowForge
    ) -> None:
        first = app.add_schedule("s", HOURLY, WORKFLOW).next_fire_at
        assert first is not None
        back_at = first + timedelta(hours=5, minutes=20)
        fired = app.fire_due_schedules(as_of=back_at)
        assert [f.fire_at for f in fired] == [first + timedelta(hours=5)]
        assert app.get_schedule("s").next_fire_at == first + timedelta(hours=6)
        assert len(runs_of(app, "s")) == 1

    def test_catch_up_n_runs_the_newest_n_missed_fire_times_oldest_first_then_the_latest(
        self, app: FlowForge
    ) -> None:
        first = app.add_schedule("s", HOURLY, WORKFLOW, catch_up=2).next_fire_at
        assert first is not None
        fired = app.fire_due_schedules(as_of=first + timedelta(hours=5, minutes=20))
        expected = [first + timedelta(hours=h) for h in (3, 4, 5)]
        assert [f.fire_at for f in fired] == expected
        assert fire_times(app, "s") == expected
        assert sorted(runs_of(app, "s")) == [
            cron_schedule.idempotency_key("s", t) for t in expected
        ]
        assert app.get_schedule("s").next_fire_at == first + timedelta(hours=6)

    def test_a_paused_schedule_does_not_fire_and_resume_does_not_make_up_what_it_missed(
        self, app: FlowForge
    ) -> None:
        first = app.add_schedule("s", HOURLY, WORKFLOW, catch_up=5).next_fire_at
        assert first is not None
        app.pause_schedule("s")
        assert app.fire_due_schedules(as_of=first + timedelta(hours=3)) == []
        app.resume_schedule("s")
        resumed = app.get_schedule("s")
        # The next fire time after now (the database's clock), not the ones it missed.
        assert resumed.next_fire_at == hour_after(resumed.updated_at)
        assert runs_of(app, "s") == {}

    def test_a_deleted_schedule_never_fires_again(self, app: FlowForge) -> None:
        first = app.add_schedule("s", HOURLY, WORKFLOW).next_fire_at
        assert first is not None
        app.delete_schedule("s")
        assert app.fire_due_schedules(as_of=first + timedelta(days=1)) == []
        assert runs_of(app, "s") == {}

    def test_a_fire_whose_run_exists_already_records_that_run_and_creates_none(
        self, app: FlowForge
    ) -> None:
        first = app.add_schedule("s", HOURLY, WORKFLOW).next_fire_at
        assert first is not None
        # The second guard: a run with the fire's key (submitted by hand) is the fire's.
        existing = app.start_workflow_run(
            WORKFLOW, idempotency_key=cron_schedule.idempotency_key("s", first)
        )
        (fired,) = app.fire_due_schedules(as_of=first)
        assert fired.run_id == existing
        assert len(app.every_run()) == 1

    def test_the_scheduler_pass_fires_due_schedules_only_when_it_has_no_scope(
        self, app: FlowForge
    ) -> None:
        # Every second (six fields): due within a second by the database's clock.
        row = app.add_schedule("tick", "* * * * * *", WORKFLOW)
        assert row.next_fire_at is not None
        wait_until(
            lambda: app.database_now() >= row.next_fire_at,  # type: ignore[operator]
            5,
            "the first fire time never came",
        )
        scoped = Scope.of_task_types(["extract", "load"])
        assert app.schedule_once(scope=scoped).fired == 0
        assert runs_of(app, "tick") == {}
        assert app.schedule_once(scope=EVERY_RUN).fired == 1
        assert len(runs_of(app, "tick")) == 1

    def test_the_next_timer_is_the_next_fire_time_for_a_scheduler_without_a_scope(
        self, app: FlowForge
    ) -> None:
        assert app.seconds_to_next_timer() is None
        row = app.add_schedule("s", HOURLY, WORKFLOW)
        assert row.next_fire_at is not None
        timer = app.seconds_to_next_timer()
        assert timer is not None
        expected = (row.next_fire_at - app.database_now()).total_seconds()
        assert expected - 5 < timer <= expected + 1
        assert app.seconds_to_next_timer(scope=Scope.of_runs([row.id])) is None
        app.pause_schedule("s")
        assert app.seconds_to_next_timer() is None


class TestRebuild:
    def test_rebuilding_gives_identical_schedule_rows_and_each_agrees_with_its_log(
        self, app: FlowForge, raw: DirectDatabase
    ) -> None:
        first = app.add_schedule("a", HOURLY, WORKFLOW, {"n": 1}, catch_up=1).next_fire_at
        assert first is not None
        app.add_schedule("b", "30 2 * * *", WORKFLOW, timezone="Europe/Paris")
        app.add_schedule("c", HOURLY, WORKFLOW)
        app.fire_due_schedules(as_of=first + timedelta(hours=2, minutes=1))
        app.pause_schedule("b")
        app.delete_schedule("c")
        app.add_schedule("c", "*/5 * * * *", WORKFLOW)  # the name again, a new schedule
        app.pause_schedule("a")
        app.resume_schedule("a")
        before = raw.execute("SELECT * FROM schedules ORDER BY id")
        runs = raw.execute("SELECT * FROM workflow_runs ORDER BY id")
        # a: its latest 2 of 3 due fire times (catch-up 1); c (the first): its latest.
        assert len(before) == 4 and len(runs) == 3

        raw.execute(
            "UPDATE schedules SET state = 'paused', next_fire_at = NULL, version = 9"
            " WHERE state = 'active'"
        )
        raw.execute("DELETE FROM schedules WHERE name = 'b'")
        assert raw.execute("SELECT * FROM schedules ORDER BY id") != before
        app.rebuild_projections()

        assert raw.execute("SELECT * FROM schedules ORDER BY id") == before
        assert raw.execute("SELECT * FROM workflow_runs ORDER BY id") == runs
        for row in app.list_schedules():
            snapshot = app.schedule_aggregate(row.name).snapshot()
            assert {k: getattr(row, k) for k in snapshot} == snapshot


@pytest.mark.postgres
class TestRaces:
    SCHEDULERS = 4

    @pytest.fixture
    def schedulers(self, pg_app: FlowForge, postgres_url: str) -> Iterator[list[FlowForge]]:
        """Several schedulers' services, each with its own connections."""
        apps = [FlowForge(postgres_url) for _ in range(self.SCHEDULERS)]
        yield apps
        for each in apps:
            each.close()

    def test_schedulers_racing_to_fire_one_schedule_create_exactly_one_run_per_fire_time(
        self,
        pg_app: FlowForge,
        schedulers: list[FlowForge],
        postgres_url: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.DEBUG, logger="flowforge.app.cron_schedules")
        row: ScheduleView = pg_app.add_schedule("race", HOURLY, WORKFLOW, catch_up=2)
        assert row.next_fire_at is not None
        expected: list[datetime] = []
        for round_ in range(4):
            # Each round, the schedulers come back together after some hours of downtime.
            as_of = row.next_fire_at + timedelta(hours=3 * round_ + 2, minutes=1)
            results = race(*(partial(s.fire_due_schedules, as_of=as_of) for s in schedulers))
            fired = [f for result in results for f in result]
            times = [f.fire_at for f in fired]
            assert len(times) == len(set(times)), f"round {round_}: a fire time fired twice"
            expected += sorted(times)
            assert len(times) == 3, f"round {round_}: {times}"

        # The schedulers did race: some lost a fire and rolled it back.
        lost = [r for r in caplog.records if r.getMessage() == "schedule fired elsewhere"]
        assert lost
        assert fire_times(pg_app, "race") == expected
        keys = runs_of(pg_app, "race")
        assert sorted(keys) == sorted(cron_schedule.idempotency_key("race", t) for t in expected)
        assert len(pg_app.every_run()) == len(expected)  # no run was left by a loser
        events = _events(pg_app, row.id)
        assert [e.originator_version for e in events] == list(range(1, len(expected) + 2))
        # What the racing schedulers left, rebuilt from the log, is the same rows.
        raw = DirectDatabase("postgres", postgres_url)
        tables = ("SELECT * FROM schedules", "SELECT * FROM workflow_runs ORDER BY id")
        before = [raw.execute(query) for query in tables]
        pg_app.rebuild_projections()
        assert [raw.execute(query) for query in tables] == before

    def test_a_pause_racing_a_fire_has_one_winner_and_the_run_exists_iff_the_fire_won(
        self, pg_app: FlowForge, schedulers: list[FlowForge]
    ) -> None:
        for round_ in range(5):
            name = f"s{round_}"
            first = pg_app.add_schedule(name, HOURLY, WORKFLOW).next_fire_at
            assert first is not None
            fired, paused = race(
                partial(schedulers[0].fire_due_schedules, as_of=first),
                partial(schedulers[1].pause_schedule, name),
            )
            assert paused  # a pause of an active schedule always takes its edge
            row = pg_app.get_schedule(name)
            assert row.state == "paused"
            assert len(runs_of(pg_app, name)) == len(fired) == (row.last_run_id is not None)


def _events(app: FlowForge, aggregate_id: UUID) -> list[Any]:
    return [
        app.events.mapper.to_domain_event(stored)
        for stored in app.events.recorder.select_events(aggregate_id)
    ]


def test_fire_times_are_utc(app: FlowForge) -> None:
    row = app.add_schedule("s", "0 9 * * *", WORKFLOW, timezone="America/New_York")
    assert row.next_fire_at is not None
    assert row.next_fire_at.utcoffset() == timedelta(0)
    assert row.next_fire_at.astimezone(UTC).hour in (13, 14)  # 09:00 EST or EDT


def test_the_cli_refuses_a_bad_schedule_in_one_line_with_its_exit_code(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process (the real CLI is tests/e2e/test_cli_schedule.py): its logging set-up
    # would replace pytest's handlers.
    monkeypatch.setattr(logs, "configure", lambda level, log_format="text": None)
    FlowForge(sqlite_url, migrate=True).close()
    workflow = str(Path(__file__).resolve().parents[2] / "examples" / "fan_out.toml")

    def add(*flags: str) -> tuple[int, str]:
        code = cli_main.main(
            ["schedule", "add", "s", *flags, "--database-url", sqlite_url, workflow]
        )
        return code, capsys.readouterr().err

    for flags, code, says in [
        (
            ["--cron", "61 * * * *"],
            exits.EXIT_BAD_INPUT,
            "cron expression '61 * * * *': bad minute",
        ),
        (["--cron", "* * *"], exits.EXIT_BAD_INPUT, "expected 5 fields"),
        (["--cron", "@often"], exits.EXIT_BAD_INPUT, "'@often': not a nickname; use one of"),
        (
            ["--cron", "* * * * *", "--timezone", "Mars/Olympus"],
            exits.EXIT_BAD_INPUT,
            "Mars/Olympus",
        ),
        (["--cron", "* * * * *", "--catch-up", "5000"], exits.EXIT_BAD_INPUT, "from 0 to 1000"),
    ]:
        got, err = add(*flags)
        assert got == code, err
        assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert add("--cron", "* * * * *")[0] == exits.EXIT_OK
    assert add("--cron", "* * * * *") == (
        exits.EXIT_REFUSED,
        "error: a schedule named 's' exists: pick another name, or delete it first "
        "(`flowforge schedule delete s`)\n",
    )
