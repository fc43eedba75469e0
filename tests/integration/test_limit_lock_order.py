"""The lock order that keeps concurrency limits free of deadlocks, on PostgreSQL
(docs/scheduling/limits.md, "Deadlocks"): every writer takes task rows, in id order,
before counter rows (``run_limits``, then ``task_type_limits``).

Each test plays one writer by hand on a connection of its own: it locks a task row as
that writer's first statement does, lets the command under test run into that lock
(seen waiting in ``pg_stat_activity``), then writes the counter row as that writer's next
statement does. A command that took the counter row before the task row holds it by
then: the two wait for each other, PostgreSQL aborts one ("deadlock detected") and the
test fails. Taken in order, the hand-played writer goes through and commits, and the
command finishes after it. SQLite has one writer at a time: no lock order to keep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge.app.commands import Finish
from flowforge.app.service import FlowForge
from tests.helpers import wait_until

FAN = {
    "name": "fan",
    "max_running_tasks": 5,
    "tasks": [{"key": f"t{i}", "type": "slow"} for i in range(3)],
}


@pytest.fixture
def limited(pg_app: FlowForge) -> tuple[FlowForge, UUID, list[UUID]]:
    """A run whose three tasks have a run limit and a type limit: its id and its task
    ids in id order (the lock order)."""
    assert pg_app.set_task_type_limit("slow", 5)
    run_id = pg_app.start_workflow_run(FAN)
    return pg_app, run_id, sorted(t.id for t in pg_app.task_runs(run_id))


class Outcome:
    """What a command run in a thread returned or raised."""

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


@contextmanager
def in_thread(command: Callable[[], Any]) -> Iterator[Outcome]:
    outcome = Outcome()

    def run() -> None:
        try:
            outcome.value = command()
        except BaseException as exc:
            outcome.error = exc
        finally:
            outcome.done.set()

    thread = threading.Thread(target=run, name="command")
    thread.start()
    try:
        yield outcome
    finally:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the command is stuck"


def waiting_for_a_lock(url: str, other_than: int) -> bool:
    """Whether another backend of this database waits for a lock."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> %s",
            (other_than,),
        ).fetchone()
    return bool(row and row[0])


def play_writer(
    url: str, task_run_id: UUID, counter: str, key: str, command: Callable[[], Any]
) -> Outcome:
    """Lock ``task_run_id``'s row, run ``command`` into it, then write the counter row
    ``counter`` (``run_limits`` by run id, ``task_type_limits`` by type) and commit."""
    column = "workflow_run_id" if counter == "run_limits" else "task_type"
    with psycopg.connect(url) as writer:
        writer.execute("SET deadlock_timeout = '100ms'")
        writer.execute("SELECT 1 FROM task_runs WHERE id = %s FOR UPDATE", (task_run_id,))
        with in_thread(command) as outcome:
            wait_until(
                lambda: waiting_for_a_lock(url, writer.info.backend_pid),
                10,
                "the command to wait for the task row",
            )
            writer.execute(
                f"UPDATE {counter} SET running = running WHERE {column} = %s", (key,)
            )  # raises DeadlockDetected if the command holds the counter row
            writer.commit()
    assert outcome.error is None, f"the command raised {outcome.error!r}"
    return outcome


def test_an_ended_runs_cancel_locks_its_tasks_before_freeing_a_slot(
    limited: tuple[FlowForge, UUID, list[UUID]], postgres_url: str
) -> None:
    """The reaper reclaiming a running task while the user cancels its run: the reclaim
    holds the task's row and then frees the run's slot."""
    app, run_id, (first, second, _) = limited
    assert app.claim_task_run(first, "w1") is not None
    assert app.claim_task_run(second, "w2") is not None

    outcome = play_writer(
        postgres_url, second, "run_limits", str(run_id), lambda: app.cancel_workflow_run(run_id)
    )

    assert outcome.value is True
    assert {t.state for t in app.task_runs(run_id)} == {"cancelled"}


def test_a_limited_claim_locks_its_task_before_taking_a_slot(
    limited: tuple[FlowForge, UUID, list[UUID]], postgres_url: str
) -> None:
    """An ended run's advance holding a ready task's row (it locks them all) and then
    freeing the run's slot as it cancels a running one, while a worker claims that task."""
    app, run_id, (first, second, _) = limited
    assert app.claim_task_run(first, "w1") is not None

    outcome = play_writer(
        postgres_url, second, "run_limits", str(run_id), lambda: app.claim_task_run(second, "w2")
    )

    assert outcome.value is not None  # the hand-played writer changed nothing: claimed
    assert app.get_task_run(second).state == "running"


def test_a_batch_of_successes_locks_its_tasks_before_freeing_a_slot(
    limited: tuple[FlowForge, UUID, list[UUID]], postgres_url: str
) -> None:
    """A worker's batch of two successes while the reaper reclaims the second task: the
    batch's first success frees a slot of the type that the reclaim then frees too."""
    app, _, (first, second, _) = limited
    # Claimed as a worker claims: the claim returns the run, whose definition the worker
    # parses (so the successes of tasks without dependents go in one batch).
    claims, (run,) = app.claim_task_runs_and_their_runs([first, second], "w1")
    app.definitions.of(run)
    finishes = [
        Finish(claim.id, claim.fencing_token, "succeed", result={"n": 1})
        for claim in claims
        if claim is not None
    ]
    assert len(finishes) == 2

    outcome = play_writer(
        postgres_url, second, "task_type_limits", "slow", lambda: app.finish_task_runs(finishes)
    )

    assert outcome.value == [True, True]
    assert [app.get_task_run(task).state for task in (first, second)] == ["succeeded"] * 2
