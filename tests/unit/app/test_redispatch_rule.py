"""The redispatch net's rule (flowforge/app/redispatch.py): a new dispatch only for a
shortfall of the queue, and only for a candidate that stayed one on two passes or more,
for the confirmation time."""

from __future__ import annotations

from uuid import UUID, uuid4

from hypothesis import given
from hypothesis import strategies as st

from flowforge.app import redispatch
from flowforge.app.redispatch import Tally, choose, confirm_after, deficit


def ids(n: int) -> list[UUID]:
    return [uuid4() for _ in range(n)]


def test_a_queue_that_holds_a_message_per_waiting_task_loses_nothing() -> None:
    stalled = ids(50)
    assert choose(Tally(50, 50, stalled), dict.fromkeys(stalled, 0.0), 99.0, 1.0) == ([], {})


def test_a_broker_that_cannot_be_asked_redispatches_nothing() -> None:
    stalled = ids(3)
    assert deficit(3, None) == 0
    assert choose(Tally(3, None, stalled), dict.fromkeys(stalled, 0.0), 99.0, 1.0) == ([], {})


def test_a_purged_queue_s_tasks_are_replaced_once_confirmed() -> None:
    stalled = ids(4)
    tally = Tally(4, 0, stalled)
    now, suspects = choose(tally, {}, 10.0, 2.0)
    assert (now, suspects) == ([], dict.fromkeys(stalled, 10.0))  # the first pass suspects
    now, suspects = choose(tally, suspects, 11.0, 2.0)
    assert (now, suspects) == ([], dict.fromkeys(stalled, 10.0))  # not yet confirmed
    now, suspects = choose(tally, suspects, 12.0, 2.0)
    assert (now, suspects) == (stalled, {})


def test_even_with_no_confirmation_time_a_first_sight_is_only_a_suspicion() -> None:
    stalled = ids(2)
    now, suspects = choose(Tally(2, 0, stalled), {}, 5.0, 0.0)
    assert now == []
    assert choose(Tally(2, 0, stalled), suspects, 5.0, 0.0)[0] == stalled


def test_only_the_oldest_of_the_deficit_are_candidates() -> None:
    stalled = ids(10)
    _, suspects = choose(Tally(10, 7, stalled), {}, 0.0, 1.0)
    assert list(suspects) == stalled[:3]


def test_a_moment_s_race_that_moves_on_redispatches_nothing() -> None:
    # A worker holds the head of the queue for a moment, then claims it: the next
    # pass's candidate is another task, and the first is forgotten.
    stalled = ids(5)
    _, suspects = choose(Tally(5, 4, stalled), {}, 0.0, 1.0)
    now, suspects = choose(Tally(4, 3, stalled[1:]), suspects, 5.0, 1.0)
    assert (now, suspects) == ([], {stalled[1]: 5.0})


def test_the_confirmation_is_the_period_up_to_a_cap() -> None:
    assert confirm_after(2.0) == 2.0
    assert confirm_after(300.0) == redispatch.CONFIRM_MAX_S == 10.0


def test_the_reasons_are_named() -> None:
    assert redispatch.REASONS == ("queue_short", "runner_started")


@given(
    waiting=st.integers(0, 120),
    queued=st.one_of(st.none(), st.integers(0, 240)),
    stalled=st.integers(0, 120),
    suspected=st.integers(0, 120),
    elapsed=st.floats(0, 20),
    confirm=st.floats(0, 15),
)
def test_never_more_than_the_shortfall_and_only_confirmed_suspects(
    waiting: int,
    queued: int | None,
    stalled: int,
    suspected: int,
    elapsed: float,
    confirm: float,
) -> None:
    tasks = ids(min(stalled, waiting))
    suspects = dict.fromkeys(tasks[:suspected], 100.0)
    now, later = choose(Tally(waiting, queued, tasks), suspects, 100.0 + elapsed, confirm)
    short = 0 if queued is None else max(0, waiting - queued)
    assert len(now) + len(later) == min(short, len(tasks))
    assert set(now) <= set(suspects)  # never on first sight
    assert elapsed >= confirm or now == []  # never before its confirmation time
    assert not set(now) & set(later)
    assert now == sorted(now, key=tasks.index)  # the oldest first
    if queued is not None and queued >= waiting:
        assert now == [] and later == {}  # a backlog, or a type with no worker: nothing


@given(
    backlog=st.integers(1, 400),
    passes=st.integers(1, 40),
    drained=st.integers(0, 40),
    held=st.integers(0, 3),
)
def test_a_backlog_draining_over_many_passes_gets_no_duplicate(
    backlog: int, passes: int, drained: int, held: int
) -> None:
    # Every message is in its queue, but for the `held` at its head that workers hold
    # for a moment (taken, not yet claimed); each pass (1 s apart, confirmation 2 s) the
    # workers claim those and take `drained` more. However long it waits, no duplicate.
    tasks, suspects, duplicates = ids(backlog), dict[UUID, float](), 0
    for second in range(passes):
        queued = max(0, len(tasks) - held)
        now, suspects = choose(Tally(len(tasks), queued, tasks), suspects, float(second), 2.0)
        duplicates += len(now)
        tasks = tasks[max(drained, held) :] if drained or held else tasks
    assert duplicates == 0
