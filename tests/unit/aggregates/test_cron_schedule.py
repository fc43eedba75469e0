"""The Schedule aggregate and its state machine (pure): the table, the commands' edges
and conditions, the events' replay, and the fired runs' idempotency keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo

import pytest

from flowforge import errors
from flowforge.aggregates import cron_schedule
from flowforge.aggregates.cron_schedule import Schedule
from flowforge.aggregates.machines import SCHEDULE_MACHINE, StateMachine, Transition
from flowforge.aggregates.states import ScheduleState

AT = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
FIRST = AT + timedelta(hours=1)


def new(**overrides: Any) -> Schedule:
    fields: dict[str, Any] = {
        "at": AT,
        "name": "nightly",
        "cron": "0 * * * *",
        "timezone": "UTC",
        "workflow_name": "w",
        "definition": {"name": "w", "tasks": [{"key": "a", "type": "t"}]},
        "inputs": {"rows": 8},
        "catch_up": 0,
        "next_fire_at": FIRST,
        "actor": "user",
    }
    fields.update(overrides)
    return cron_schedule.new_schedule(uuid4(), **fields)


def replayed(aggregate: Schedule) -> Schedule:
    rebuilt: Any = None
    for event in aggregate.collect_events():
        rebuilt = event.mutate(rebuilt)
    assert isinstance(rebuilt, Schedule)
    return rebuilt


def test_the_table_is_active_paused_deleted_with_pause_resume_and_two_deletes() -> None:
    edges = {(t.name, t.source, t.target) for t in SCHEDULE_MACHINE}
    assert edges == {
        ("pause", ScheduleState.ACTIVE, ScheduleState.PAUSED),
        ("resume", ScheduleState.PAUSED, ScheduleState.ACTIVE),
        ("delete", ScheduleState.ACTIVE, ScheduleState.DELETED),
        ("delete_paused", ScheduleState.PAUSED, ScheduleState.DELETED),
    }
    assert SCHEDULE_MACHINE.initial is ScheduleState.ACTIVE
    assert SCHEDULE_MACHINE.terminal == {ScheduleState.DELETED}
    assert not any(t.requires_lease for t in SCHEDULE_MACHINE)


def test_the_table_is_validated_like_the_others_an_edge_out_of_deleted_is_refused() -> None:
    with pytest.raises(ValueError, match="edges out of a terminal state: \\['undelete'\\]"):
        StateMachine(
            "Schedule",
            ScheduleState,
            initial=ScheduleState.ACTIVE,
            terminal=(ScheduleState.DELETED,),
            transitions=(
                *SCHEDULE_MACHINE,
                Transition("undelete", ScheduleState.DELETED, ScheduleState.ACTIVE),
            ),
        )


def test_an_unknown_edge_is_illegal_before_anything_happens() -> None:
    with pytest.raises(errors.IllegalTransitionError, match="'fire' is not a transition"):
        SCHEDULE_MACHINE.get("fire")


def test_a_new_schedule_is_active_with_its_first_fire_time_and_no_fire_yet() -> None:
    created = new()
    assert created.state is ScheduleState.ACTIVE
    assert (created.next_fire_at, created.last_fire_at, created.last_run_id) == (FIRST, None, None)
    assert replayed(created).snapshot() == created.snapshot()


def test_pause_clears_the_next_fire_and_resume_sets_the_one_it_is_given() -> None:
    paused = new()
    assert paused.pause(at=AT, actor="u")
    assert (paused.state, paused.next_fire_at) == (ScheduleState.PAUSED, None)
    assert not paused.pause(at=AT, actor="u")  # already paused: no event
    later = FIRST + timedelta(days=3)
    assert paused.resume(later, at=AT, actor="u")
    assert (paused.state, paused.next_fire_at) == (ScheduleState.ACTIVE, later)
    assert not paused.resume(later, at=AT, actor="u")
    events = [type(e).__name__ for e in paused.collect_events()]
    assert events == ["Created", "Paused", "Resumed"]


@pytest.mark.parametrize("pause_first", [False, True])
def test_delete_is_final_from_active_or_paused(pause_first: bool) -> None:
    gone = new()
    if pause_first:
        gone.pause(at=AT, actor="u")
    assert gone.delete(at=AT, actor="u")
    assert (gone.state, gone.next_fire_at) == (ScheduleState.DELETED, None)
    assert not gone.delete(at=AT, actor="u")
    assert not gone.resume(FIRST, at=AT, actor="u")
    assert not gone.pause(at=AT, actor="u")
    assert not gone.fire(FIRST, FIRST, FIRST, uuid4(), at=AT)
    last = gone.collect_events()[-1]
    assert type(last) is (Schedule.PausedDeleted if pause_first else Schedule.Deleted)


def test_a_fire_records_its_time_and_run_and_only_from_the_next_fire_time_it_read() -> None:
    fired = new()
    run = uuid4()
    following = FIRST + timedelta(hours=1)
    assert not fired.fire(FIRST - timedelta(hours=1), FIRST, following, run, at=FIRST)  # stale
    assert fired.fire(FIRST, FIRST, following, run, at=FIRST)
    assert (fired.state, fired.next_fire_at) == (ScheduleState.ACTIVE, following)
    assert (fired.last_fire_at, fired.last_run_id) == (FIRST, run)
    assert not fired.fire(FIRST, FIRST, following, uuid4(), at=FIRST)  # fired already
    paused = new()
    paused.pause(at=AT, actor="u")
    assert not paused.fire(None, FIRST, following, run, at=FIRST)  # type: ignore[arg-type]
    events = fired.collect_events()
    assert [type(e).__name__ for e in events] == ["Created", "Fired"]
    assert (events[1].source, events[1].state) == ("active", "active")  # type: ignore[attr-defined]


def test_replay_refuses_a_forged_fire_that_leaves_another_state() -> None:
    fired = new()
    fired.fire(FIRST, FIRST, FIRST + timedelta(hours=1), uuid4(), at=FIRST)
    created, fire = fired.collect_events()
    forged = Schedule.Fired(
        **{**vars(fire), "state": "paused"},  # a fire never pauses
    )
    with pytest.raises(errors.CorruptEventLogError, match="'fire' records 'active' -> 'paused'"):
        forged.mutate(created.mutate(None))


def test_a_fired_runs_key_is_the_schedules_name_and_the_fire_time_to_the_second() -> None:
    key = cron_schedule.idempotency_key(
        "nightly", datetime(2026, 3, 29, 1, 0, 0, 1234, tzinfo=UTC)
    )
    assert key == "schedule:nightly@2026-03-29T01:00:00Z"
    assert cron_schedule.idempotency_key("a", FIRST) != cron_schedule.idempotency_key("a", AT)
    # The same instant read in another time zone (a session's) is the same key.
    paris = FIRST.astimezone(ZoneInfo("Europe/Paris"))
    assert cron_schedule.idempotency_key("a", paris) == cron_schedule.idempotency_key("a", FIRST)


def test_every_event_carries_the_whole_mutable_state() -> None:
    assert cron_schedule.MUTABLE_FIELDS == ("state", "next_fire_at", "last_fire_at", "last_run_id")
    run: UUID = uuid4()
    fired = new()
    fired.fire(FIRST, FIRST, FIRST + timedelta(hours=1), run, at=FIRST)
    fired.pause(at=FIRST, actor="u")
    *_, paused = fired.collect_events()
    assert cron_schedule.DECLARATION.carried(paused) == {
        "state": "paused",
        "next_fire_at": None,
        "last_fire_at": FIRST,
        "last_run_id": run,
    }
