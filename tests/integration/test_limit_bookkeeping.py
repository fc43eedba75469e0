"""Concurrency limits' bookkeeping on both backends (docs/scheduling/limits.md, "What
is kept, and for how long"): the held row of a task cancelled while held goes with
the cancel; a change of a limit waiting for a long write does not hold claims and
finishes behind it (PostgreSQL); the bound of a counter kept after ``limit unset``."""

from __future__ import annotations

import threading
import time
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


def test_a_limit_change_waiting_for_a_writer_does_not_hold_claims_and_finishes_behind_it(
    pg_app: FlowForge, postgres_url: str
) -> None:
    """``limit set`` takes ``task_runs`` in SHARE ROW EXCLUSIVE mode (a new counter must
    count the type's running tasks exactly). Waiting for it behind a long write, it
    would queue every claim and finish behind itself; it waits at most 100 ms a try
    instead, giving way between tries, so a claim and a finish of another type go
    through while the long write lasts, and the change is made once it ends."""
    (other,) = ids(pg_app, pg_app.start_workflow_run(fan(1, task_type="other")))
    result: list[bool] = []
    with psycopg.connect(postgres_url) as writer:
        writer.execute("UPDATE task_runs SET version = version WHERE false")  # a long write
        changer = threading.Thread(
            target=lambda: result.append(pg_app.set_task_type_limit("slow", 1))
        )
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
        ("slow", 1, 0)
    ]


def claim_and_finish(app: FlowForge, task_run_id: UUID) -> None:
    claim = app.claim_task_run(task_run_id, "w1")
    assert claim is not None
    assert app.finish_task_run(task_run_id, claim.fencing_token, "succeed")


def test_after_limit_unset_a_type_keeps_its_counter_and_pays_one_round_trip_per_claim(
    pg_app: FlowForge, round_trips: list[RoundTrip]
) -> None:
    """The bound of a counter row kept after ``limit unset`` (docs/scheduling/limits.md,
    "What is kept"): its type's claims stay on the limited path, one round trip more
    each and never refused, and the counter keeps counting exactly, so a limit set
    again applies to the tasks already running."""
    assert pg_app.set_task_type_limit("slow", 1)
    assert pg_app.unset_task_type_limit("slow")
    first, second, third = ids(pg_app, pg_app.start_workflow_run(fan(3)))

    round_trips.clear()
    assert pg_app.claim_task_run(first, "w") is not None
    assert len(round_trips) == 2  # the fast claim, which matches no row, then the limited
    assert pg_app.claim_task_run(second, "w") is not None  # no limit: never refused
    assert [(v.task_type, v.max_running, v.running) for v in pg_app.task_type_limits()] == [
        ("slow", None, 2)
    ]
    assert pg_app.set_task_type_limit("slow", 2)
    assert pg_app.claim_task_run(third, "w") is None  # the two running count
