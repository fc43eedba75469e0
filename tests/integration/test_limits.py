"""Concurrency limits on both backends (docs/scheduling/limits.md): a claim past a limit
loses and leaves the task ready with its dispatch held; every edge that leaves running
frees its slot and dispatches the oldest held task again in its own transaction; the
counters match the rows; and, on PostgreSQL, 16 workers racing for a limit of 2 never
run 3, and an unlimited claim or finish costs no round trip more."""

from __future__ import annotations

import re
import time
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.aggregates import task_type_limit
from flowforge.aggregates.task_type_limit import TaskTypeLimit
from flowforge.app import why
from flowforge.app.commands import Finish
from flowforge.app.service import FlowForge
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import (
    LEASE_S,
    Recorder,
    RoundTrip,
    handle_next,
    race,
    task_id,
    wait_until,
    wait_until_expired,
)

TINY = 0.001


def fan(n: int, task_type: str = "slow", **fields: Any) -> dict[str, Any]:
    """``n`` independent tasks of one type; ``fields`` add to the definition."""
    return {
        "name": "fan",
        **fields,
        "tasks": [{"key": f"t{i}", "type": task_type} for i in range(n)],
    }


def ids(app: FlowForge, run_id: UUID) -> list[UUID]:
    return [t.id for t in sorted(app.task_runs(run_id), key=lambda t: t.task_key)]


def running(app: FlowForge, task_type: str) -> int:
    """The type's counter (``None`` when it has none)."""
    return next(limit.running for limit in app.task_type_limits() if limit.task_type == task_type)


def run_counter(app: FlowForge, run_id: UUID) -> int:
    with app.store.read() as reads:
        row = reads.run_limit(run_id)
    assert row is not None
    return int(row["running"])


def dispatches(app: FlowForge, task_run_id: UUID) -> int:
    return len(app.dispatches_of(task_run_id))


def finish(app: FlowForge, task_run_id: UUID, outcome: str = "succeed") -> None:
    row = app.get_task_run(task_run_id)
    error = {"type": "Boom", "message": "no"} if outcome == "fail" else None
    assert app.finish_task_run(task_run_id, row.fencing_token, outcome, error=error)


# --- the contract, on both backends --------------------------------------------------------


def test_a_claim_past_a_type_limit_loses_and_the_task_stays_ready_with_its_dispatch_held(
    app: FlowForge,
) -> None:
    assert app.set_task_type_limit("slow", 2)
    first, second, third = ids(app, app.start_workflow_run(fan(3)))

    assert app.claim_task_run(first, "w1") is not None
    assert app.claim_task_run(second, "w2") is not None
    assert app.claim_task_run(third, "w3") is None  # a lost claim, not an error

    assert app.get_task_run(third).state == "ready"
    assert running(app, "slow") == 2
    hold = app.hold_of(app.get_task_run(third))
    assert hold is not None and (hold.held_by, hold.limit, hold.running) == ("type", 2, 2)


def test_a_finish_frees_its_slot_and_dispatches_the_oldest_held_task_in_its_transaction(
    app: FlowForge,
) -> None:
    assert app.set_task_type_limit("slow", 1)
    first, second, third = ids(app, app.start_workflow_run(fan(3)))
    assert app.claim_task_run(first, "w1") is not None
    assert app.claim_task_run(second, "w2") is None
    held = app.database_now()
    while app.database_now() <= held:  # the holds' times apart, so "oldest" is second
        time.sleep(0.001)
    assert app.claim_task_run(third, "w3") is None
    assert (dispatches(app, second), dispatches(app, third)) == (1, 1)

    finish(app, first)

    assert running(app, "slow") == 0
    # The oldest held task is dispatched again, by the finish itself; the other waits.
    assert (dispatches(app, second), dispatches(app, third)) == (2, 1)
    assert app.claim_task_run(second, "w2") is not None
    assert app.hold_of(app.get_task_run(second)) is None
    finish(app, second, "fail")  # a failure frees its slot too
    assert dispatches(app, third) == 2
    assert app.claim_task_run(third, "w3") is not None


@pytest.mark.parametrize("leaves", ["cancel", "reap"])
def test_a_cancel_or_a_reap_frees_the_slot_of_the_running_task(
    app: FlowForge, leaves: str
) -> None:
    assert app.set_task_type_limit("slow", 1)
    run_id = app.start_workflow_run(fan(2))
    first, second = ids(app, run_id)
    assert app.claim_task_run(first, "w1", TINY if leaves == "reap" else LEASE_S) is not None
    assert app.claim_task_run(second, "w2") is None

    if leaves == "cancel":
        assert app.cancel_workflow_run(run_id)
        assert app.get_task_run(first).state == "cancelled"
    else:
        wait_until_expired(app, first)
        assert app.reclaim_task_run(first)
        assert dispatches(app, second) == 2
        assert app.claim_task_run(second, "w2") is not None
    assert running(app, "slow") == (0 if leaves == "cancel" else 1)


def test_a_timed_out_attempt_frees_its_slot_and_dispatches_the_held_task(
    app: FlowForge,
) -> None:
    """The execution timeout's fail is its own statement (task_time_out): it frees the
    slot like every edge out of running (docs/scheduling/timeouts.md)."""
    assert app.set_task_type_limit("slow", 1)
    definition = fan(2)
    definition["tasks"][0]["timeout_seconds"] = TINY
    first, second = ids(app, app.start_workflow_run(definition))
    won = app.claim_task_run(first, "w1")
    assert won is not None
    assert app.claim_task_run(second, "w2") is None
    wait_until(app.overdue_tasks, 5, "the attempt never passed its deadline")

    assert app.time_out_task_run(first, won.fencing_token)

    assert running(app, "slow") == 0
    assert dispatches(app, second) == 2
    assert app.claim_task_run(second, "w2") is not None


def test_a_runs_max_running_tasks_limits_its_own_tasks_only(app: FlowForge) -> None:
    limited = app.start_workflow_run(fan(3, max_running_tasks=2))
    other = app.start_workflow_run(fan(3))
    a, b, c = ids(app, limited)

    assert app.claim_task_run(a, "w") is not None
    assert app.claim_task_run(b, "w") is not None
    assert app.claim_task_run(c, "w") is None
    assert all(app.claim_task_run(t, "w") is not None for t in ids(app, other))
    assert run_counter(app, limited) == 2
    hold = app.hold_of(app.get_task_run(c))
    assert hold is not None and (hold.held_by, hold.limit, hold.running) == ("run", 2, 2)
    assert why.why(app, c).reason == "limit_reached"

    finish(app, a)
    assert dispatches(app, c) == 2 and app.claim_task_run(c, "w") is not None
    assert run_counter(app, limited) == 2


def test_a_tasks_own_max_running_and_the_operators_limit_take_the_smaller(
    app: FlowForge,
) -> None:
    definition = {
        "name": "own",
        "tasks": [
            {"key": "plain", "type": "slow"},
            {"key": "strict", "type": "slow", "max_running": 1},
            {"key": "loose", "type": "slow", "max_running": 5},
        ],
    }
    run_id = app.start_workflow_run(definition)
    assert app.set_task_type_limit("slow", 2)
    assert app.claim_task_run(task_id(app, run_id, "plain"), "w") is not None
    # One slow task runs: "strict" (its own limit 1) may not start, "loose" (min(2, 5)) may.
    assert app.claim_task_run(task_id(app, run_id, "strict"), "w") is None
    assert app.claim_task_run(task_id(app, run_id, "loose"), "w") is not None
    hold = app.hold_of(app.get_task_run(task_id(app, run_id, "strict")))
    assert hold is not None and (hold.limit, hold.running) == (1, 2)


def test_a_limit_set_while_tasks_run_counts_them_and_raising_it_dispatches_the_held(
    app: FlowForge,
) -> None:
    first, second, third = ids(app, app.start_workflow_run(fan(3)))
    assert app.claim_task_run(first, "w") is not None  # unlimited yet
    assert app.set_task_type_limit("slow", 1)
    assert running(app, "slow") == 1
    assert app.claim_task_run(second, "w") is None
    assert app.claim_task_run(third, "w") is None

    assert app.set_task_type_limit("slow", 3)  # room for two more: both dispatched again
    assert (dispatches(app, second), dispatches(app, third)) == (2, 2)
    assert app.unset_task_type_limit("slow")
    assert not app.unset_task_type_limit("slow")  # nothing to remove
    assert app.claim_task_run(second, "w") is not None
    assert app.claim_task_run(third, "w") is not None
    assert running(app, "slow") == 3  # the counter still counts; nothing limits it


def test_a_limit_on_one_type_leaves_the_others_alone(app: FlowForge) -> None:
    assert app.set_task_type_limit("slow", 1)
    tasks = ids(app, app.start_workflow_run(fan(3, task_type="fast")))
    assert all(app.claim_task_run(t, "w") is not None for t in tasks)
    assert [limit.task_type for limit in app.task_type_limits()] == ["slow"]


def test_each_change_of_a_limit_is_an_event_saying_who_and_when(app: FlowForge) -> None:
    assert app.set_task_type_limit("slow", 2, actor="user:ops")
    assert app.set_task_type_limit("slow", 3, actor="user:ops")
    (view,) = app.task_type_limits()
    assert view.changed_by == "user:ops"
    assert app.unset_task_type_limit("slow", actor="user:lead")
    assert app.task_type_limits() == []  # idle: its counter deleted; the log keeps all

    limit: TaskTypeLimit = app.events.repository.get(task_type_limit.limit_id("slow"))
    assert (limit.task_type, limit.max_running, limit.version) == ("slow", None, 3)
    stored = app.events.recorder.select_events(task_type_limit.limit_id("slow"))
    events: list[Any] = [app.events.mapper.to_domain_event(s) for s in stored]
    assert [(e.max_running, e.actor) for e in events] == [
        (2, "user:ops"),
        (3, "user:ops"),
        (None, "user:lead"),
    ]
    assert app.set_task_type_limit("slow", 1, actor="user:lead")  # the log goes on
    assert app.events.repository.get(task_type_limit.limit_id("slow")).version == 4
    (view,) = app.task_type_limits()
    assert (view.changed_by, view.max_running) == ("user:lead", 1)


@pytest.mark.parametrize("bad", [0, -1, 2**31, 1.5, "2", True])
def test_a_bad_limit_is_refused_before_any_io(app: FlowForge, bad: Any) -> None:
    with pytest.raises(errors.InvalidLimitError):
        app.set_task_type_limit("slow", bad)
    with pytest.raises(errors.InvalidLimitError, match="plain identifier"):
        app.set_task_type_limit("not a type", 1)
    assert app.task_type_limits() == []


def test_batched_claims_and_finishes_keep_the_counters(app: FlowForge) -> None:
    assert app.set_task_type_limit("slow", 2)
    tasks = ids(app, app.start_workflow_run(fan(4)))
    rows, _ = app.claim_task_runs_and_their_runs(tasks, "w")
    claimed = [row for row in rows if row is not None]
    assert len(claimed) == 2 and running(app, "slow") == 2
    written = app.finish_task_runs(
        [Finish(row.id, row.fencing_token, "succeed") for row in claimed]
    )
    assert written == [True, True] and running(app, "slow") == 0
    held = [t for t in tasks if t not in {row.id for row in claimed}]
    assert [dispatches(app, t) for t in held] == [2, 2]


def test_why_of_a_held_task_names_the_limit_its_value_and_how_many_run(app: FlowForge) -> None:
    assert app.set_task_type_limit("slow", 1)
    first, second = ids(app, app.start_workflow_run(fan(2)))
    assert app.claim_task_run(first, "w") is not None
    assert app.claim_task_run(second, "w") is None
    explained = why.why(app, second)
    assert explained.reason == "limit_reached"
    assert "the limit on task type 'slow': 1 running, at most 1" in explained.headline


def test_a_rebuild_recounts_the_counters_from_the_rows(app: FlowForge) -> None:
    assert app.set_task_type_limit("slow", 3)
    run_id = app.start_workflow_run(fan(3, max_running_tasks=2))
    a, b, _ = ids(app, run_id)
    assert app.claim_task_run(a, "w") and app.claim_task_run(b, "w")
    finish(app, a)
    with app.store.write() as writes:  # a counter corrupted by hand
        writes.recording.tx.run("recount_task_type_limits")  # harmless, then broken:
        writes.recording.tx.run("delete_run_limits")
    app.rebuild_projections()
    assert (running(app, "slow"), run_counter(app, run_id)) == (1, 1)
    (view,) = app.task_type_limits()
    assert view.max_running == 3


# --- PostgreSQL: the race, and the hot path's round trips ------------------------------------

pg = pytest.mark.postgres


@pg
@pytest.mark.timeout(60)
def test_16_workers_racing_for_a_limit_of_2_never_run_3(pg_app: FlowForge) -> None:
    assert pg_app.set_task_type_limit("slow", 2)
    tasks = ids(pg_app, pg_app.start_workflow_run(fan(16)))

    claims = race(*[lambda t=t: pg_app.claim_task_run(t, f"w-{t}") for t in tasks])

    won = [c for c in claims if c is not None]
    rows = [pg_app.get_task_run(t) for t in tasks]
    assert len(won) == 2
    assert sum(row.state == "running" for row in rows) == 2 == running(pg_app, "slow")
    held = [row for row in rows if row.state == "ready"]
    assert len(held) == 14 and all(pg_app.hold_of(row) is not None for row in held)

    # The two finish at once: each frees one slot and dispatches one held task again.
    race(*[lambda c=c: finish(pg_app, c.task_run_id) for c in won])
    assert running(pg_app, "slow") == 0
    assert sum(dispatches(pg_app, row.id) == 2 for row in held) == 2


@pg
@pytest.mark.timeout(60)
def test_a_slot_freed_while_a_claim_is_refused_still_dispatches_the_held_task(
    pg_app: FlowForge,
) -> None:
    """The race the docs argue: a finish and a refusal of the same limit at once. Either
    the refusal sees the freed slot and claims, or its hold commits first and the finish
    (which waits for the counter row) dispatches it again. Never held with nothing sent."""
    assert pg_app.set_task_type_limit("slow", 1)
    for _ in range(10):
        first, second = ids(pg_app, pg_app.start_workflow_run(fan(2)))
        assert pg_app.claim_task_run(first, "w1") is not None
        claim, _ = race(
            partial(pg_app.claim_task_run, second, "w2"), partial(finish, pg_app, first)
        )
        if claim is None:
            assert dispatches(pg_app, second) == 2, "held, and its freed slot sent nothing"
            assert pg_app.claim_task_run(second, "w2") is not None
        finish(pg_app, second)
        assert running(pg_app, "slow") == 0


def claim_and_finish_trips(app: FlowForge, round_trips: list[RoundTrip]) -> tuple[int, int]:
    """The round trips of a claim and of a finish of a new one-task run of type fast."""
    (task,) = ids(app, app.start_workflow_run(fan(1, task_type="fast")))
    round_trips.clear()
    claim = app.claim_task_run(task, "w")
    assert claim is not None and all(trip.committed for trip in round_trips)
    claimed = len(round_trips)
    round_trips.clear()
    assert app.finish_task_run(task, claim.fencing_token, "succeed")
    return claimed, len(round_trips)


@pg
def test_an_unlimited_claim_and_finish_take_no_round_trip_more_beside_limits(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    """The pinned counts of the hot path are in test_store.py, test_leaf_finish.py and
    test_batched_claims_and_finishes.py (unchanged by limits); here, limits on other
    types and runs change nothing for a task without one."""
    without = claim_and_finish_trips(pg_app, round_trips)
    assert without[0] == 1
    assert pg_app.set_task_type_limit("slow", 1)
    pg_app.start_workflow_run(fan(2, max_running_tasks=1))
    assert claim_and_finish_trips(pg_app, round_trips) == without


@pg
def test_a_limited_claim_costs_one_round_trip_more_and_writes_only_with_its_slot(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    assert pg_app.set_task_type_limit("slow", 1)
    first, second = ids(pg_app, pg_app.start_workflow_run(fan(2)))
    round_trips.clear()
    assert pg_app.claim_task_run(first, "w") is not None
    assert len(round_trips) == 2 and all(trip.committed for trip in round_trips)
    before = pg_app.get_task_run(second).version
    assert pg_app.claim_task_run(second, "w") is None
    assert pg_app.get_task_run(second).version == before  # no event, no row change


def test_the_python_example_of_the_docs_runs_as_written(app: FlowForge) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "scheduling" / "limits.md"
    (block,) = re.findall(r"^```python\n(.*?)^```", doc.read_text(), re.MULTILINE | re.DOTALL)
    (task,) = ids(app, app.start_workflow_run(fan(1, task_type="call_api")))
    exec(block, {"app": app, "task_row": app.get_task_run(task)})
    # Set, then unset, as shown: nothing running, so the removal deleted its counter.
    assert app.task_type_limits() == []


def test_a_worker_acks_a_held_dispatch_and_runs_the_task_once_a_freed_slot_sends_it(
    app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder
) -> None:
    """The whole loop with a real worker: two dispatches of a type limited to 1; the
    first claimed, the second refused and acked unrun (no busy loop: nothing is left on
    the channel); the first's finish sends the second again, which then runs."""
    assert app.set_task_type_limit("work", 1)
    first, second = ids(app, app.start_workflow_run(fan(2, task_type="work")))
    worker = Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-test")
    assert app.claim_task_run(first, "other-worker") is not None  # the slot is taken
    assert app.publish_pending_dispatches(channel.publisher()) == 2

    handled = [handle_next(channel, worker), handle_next(channel, worker)]

    assert recorder.calls == {}  # neither ran: one claimed elsewhere, one held
    assert channel.ready_count == 0 and app.get_task_run(second).state == "ready"
    finish(app, first)
    assert app.publish_pending_dispatches(channel.publisher()) == 1
    handle_next(channel, worker)
    assert recorder.calls == {"t1": 1} and app.get_task_run(second).state == "succeeded"
    assert handled == ["skipped", "skipped"]


@pg
def test_the_freed_slots_dispatch_is_written_by_the_finishs_own_committing_round_trip(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    assert pg_app.set_task_type_limit("slow", 1)
    first, second = ids(pg_app, pg_app.start_workflow_run(fan(2)))
    claim = pg_app.claim_task_run(first, "w")
    assert claim is not None and pg_app.claim_task_run(second, "w") is None
    round_trips.clear()
    assert pg_app.finish_task_run(first, claim.fencing_token, "succeed")
    # One transaction: only its last round trip commits, and the release is in it.
    assert [trip.committed for trip in round_trips][-1]
    assert not any(trip.committed for trip in round_trips[:-1])
    assert any(b"INSERT INTO dispatch_outbox" in trip.text for trip in round_trips)
    assert dispatches(pg_app, second) == 2


def test_a_task_whose_run_has_room_but_whose_type_has_none_is_held_by_its_type(
    app: FlowForge,
) -> None:
    """The run's slot, taken first, is given back, and the hold names the type."""
    assert app.set_task_type_limit("slow", 1)
    (busy,) = ids(app, app.start_workflow_run(fan(1)))
    limited = app.start_workflow_run(fan(2, max_running_tasks=2))
    first, second = ids(app, limited)
    assert app.claim_task_run(busy, "w") is not None
    assert app.claim_task_run(first, "w") is None
    hold = app.hold_of(app.get_task_run(first))
    assert hold is not None and (hold.held_by, hold.limit, hold.running) == ("type", 1, 1)
    assert run_counter(app, limited) == 0
    finish(app, busy)  # the type's slot frees: the type's oldest held task is sent again
    assert dispatches(app, first) == 2 and dispatches(app, second) == 1
