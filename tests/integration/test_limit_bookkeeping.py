"""Concurrency limits' bookkeeping on both backends (docs/scheduling/limits.md, "What
is kept, and for how long"): the held row of a task cancelled while held goes with
the cancel; a change of a limit waiting for a long write does not hold claims and
finishes behind it (PostgreSQL); the bound of a counter kept after ``limit unset``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from uuid import UUID

import psycopg
import pytest

from flowforge.app.service import FlowForge
from tests.helpers import RoundTrip, wait_until
from tests.integration.test_limits import fan, ids
from tests.integration.test_schedule_races import waiting_for_a_lock
from tests.integration.test_wakeups import WAIT_S

#: How long a claim and a finish may wait behind a change of a limit that waits for a
#: long write: its 100 ms try, and some room for a loaded machine (the long write
#: lasts until the test ends it, over a second later).
HOLD_BOUND_S = 0.6
#: How long the test's long write lasts at most once the change waits for it.
LONG_WRITE_S = 3.0


def held_row(app: FlowForge, task_run_id: UUID) -> bool:
    with app.store.read() as reads:
        return reads.held_dispatch(task_run_id) is not None


@pytest.mark.parametrize("cancel", ["the task", "its run"])
def test_a_held_task_cancelled_leaves_no_held_row(app: FlowForge, cancel: str) -> None:
    assert app.set_task_type_limit("slow", 1)
    run_id = app.start_workflow_run(fan(2))
    first, second = ids(app, run_id)
    assert app.claim_task_run(first, "w1") is not None
    assert app.claim_task_run(second, "w2") is None
    assert held_row(app, second)

    if cancel == "the task":
        assert app.transition_task_run(second, "cancel_ready")
    else:
        assert app.cancel_workflow_run(run_id)

    assert app.get_task_run(second).state == "cancelled"
    assert not held_row(app, second)


def first_limiting_submission(app: FlowForge) -> bool:
    limited = fan(1) | {"tasks": [{"key": "t0", "type": "slow", "max_running": 1}]}
    return app.start_workflow_run(limited) is not None


def limit_set(app: FlowForge) -> bool:
    return app.set_task_type_limit("slow", 1)


#: What takes ``task_runs``' lock to make a counter row, and the counter it leaves.
COUNTER_MAKERS: dict[str, tuple[Callable[[FlowForge], bool], tuple[str, int | None, int]]] = {
    "limit set": (limit_set, ("slow", 1, 0)),
    "the first submission that limits the type": (first_limiting_submission, ("slow", None, 0)),
}


@pytest.mark.parametrize("maker", COUNTER_MAKERS)
def test_a_limit_change_waiting_for_a_writer_does_not_hold_claims_and_finishes_behind_it(
    pg_app: FlowForge, postgres_url: str, maker: str
) -> None:
    """``limit set``, and the first submission that limits a type, take ``task_runs`` in
    SHARE ROW EXCLUSIVE mode (a new counter must count the type's running tasks
    exactly). Waiting for it behind a long write, either would queue every claim and
    finish behind itself; it waits at most 100 ms a try instead, giving way between
    tries, so a claim and a finish of another type go through while the long write
    lasts, and the counter is made once it ends."""
    make_counter, counter = COUNTER_MAKERS[maker]
    (other,) = ids(pg_app, pg_app.start_workflow_run(fan(1, task_type="other")))
    result: list[bool] = []
    with psycopg.connect(postgres_url) as writer:
        writer.execute("UPDATE task_runs SET version = version WHERE false")  # a long write
        changer = threading.Thread(target=lambda: result.append(make_counter(pg_app)))
        changer.start()
        wait_until(lambda: waiting_for_a_lock(postgres_url), WAIT_S, "the change never waited")
        started = time.monotonic()
        worker = threading.Thread(target=claim_and_finish, args=(pg_app, other))
        worker.start()
        worker.join(LONG_WRITE_S)  # before this fix: until the long write ends
        took = time.monotonic() - started
        held = changer.is_alive()
        writer.commit()
    worker.join(WAIT_S)
    changer.join(WAIT_S)

    assert held, "the change did not wait for the long write"
    assert took < HOLD_BOUND_S, f"a claim and a finish waited {took:.2f}s behind the change"
    assert result == [True]
    assert pg_app.get_task_run(other).state == "succeeded"
    assert [(v.task_type, v.max_running, v.running) for v in pg_app.task_type_limits()] == [
        counter
    ]


def claim_and_finish(app: FlowForge, task_run_id: UUID) -> None:
    claim = app.claim_task_run(task_run_id, "w1")
    assert claim is not None
    assert app.finish_task_run(task_run_id, claim.fencing_token, "succeed")


def limits(app: FlowForge) -> list[tuple[str, int | None, int]]:
    return [(v.task_type, v.max_running, v.running) for v in app.task_type_limits()]


def test_a_limit_unset_while_nothing_counts_deletes_its_counter_and_claims_are_fast_again(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    """``limit unset`` of a type with nothing running, held or limited by a task's own
    ``max_running`` deletes its counter row (docs/scheduling/limits.md, "What is kept"):
    its claims take the fast path again, one round trip each."""
    assert pg_app.set_task_type_limit("slow", 1)
    assert pg_app.unset_task_type_limit("slow")
    assert limits(pg_app) == []
    first, second = ids(pg_app, pg_app.start_workflow_run(fan(2)))
    round_trips.clear()
    assert pg_app.claim_task_run(first, "w") is not None
    assert pg_app.claim_task_run(second, "w") is not None
    assert len(round_trips) == 2  # one each: the fast claim took them
    # Set again, it continues the limit's log and counts the tasks already running.
    assert pg_app.set_task_type_limit("slow", 2)
    assert limits(pg_app) == [("slow", 2, 2)]
    (third,) = ids(pg_app, pg_app.start_workflow_run(fan(1)))
    assert pg_app.claim_task_run(third, "w") is None  # the two running count


def test_after_a_deleted_counter_the_limits_log_goes_on_from_its_last_version(
    app: FlowForge,
) -> None:
    """Set, unset (deleted), set, unset, set again, and a submission that limits the type
    by its own ``max_running`` after a deletion: each change is the next event of the
    type's one TaskTypeLimit (a version taken twice would be refused by the log)."""
    for _ in range(2):
        assert app.set_task_type_limit("slow", 1)
        assert app.unset_task_type_limit("slow")
        assert limits(app) == []
    app.start_workflow_run(own_limited(1))
    assert limits(app) == [("slow", None, 0)]  # made by the submission, at the log's version
    assert app.set_task_type_limit("slow", 3)
    assert app.unset_task_type_limit("slow")
    assert limits(app) == [("slow", None, 0)]  # kept: a task of the type limits it itself


def own_limited(n: int) -> dict[str, object]:
    """``n`` tasks of type slow, each with its own ``max_running`` of 1."""
    return {
        "name": "own",
        "tasks": [{"key": f"t{i}", "type": "slow", "max_running": 1} for i in range(n)],
    }


def test_a_limit_unset_while_its_tasks_run_keeps_the_counter_counting(
    app: FlowForge,
) -> None:
    """The bound that stays: a type with tasks running (or held) when its limit is
    unset keeps its counter row, so it stays on the limited claim path (one round trip
    more per claim on PostgreSQL, never refused), and the counter keeps counting
    exactly, so a limit set again applies to the tasks already running."""
    assert app.set_task_type_limit("slow", 1)
    first, second, third = ids(app, app.start_workflow_run(fan(3)))
    assert app.claim_task_run(first, "w") is not None
    assert app.unset_task_type_limit("slow")
    assert limits(app) == [("slow", None, 1)]
    assert app.claim_task_run(second, "w") is not None  # no limit: never refused
    assert limits(app) == [("slow", None, 2)]
    assert app.set_task_type_limit("slow", 2)
    assert app.claim_task_run(third, "w") is None  # the two running count
