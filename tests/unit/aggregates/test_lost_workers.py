"""A worker lost too often: the reaper's bound (``aggregates/lost_workers.py``), in the
pure aggregate and the definition model. The SQL's guards are checked against these
rules in tests/integration/test_sql_guards.py; real processes in tests/e2e."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge.aggregates import lost_workers, task_run
from flowforge.aggregates.definition import parse_definition
from flowforge.aggregates.run_plan import planned_tasks
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import TaskRun
from flowforge.errors import InvalidWorkflowDefinitionError

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TICK = timedelta(microseconds=1)


def new_task(max_attempts: int = 3, max_worker_losses: int | None = None) -> TaskRun:
    event = task_run.created_event(
        UUID("00000000-0000-4000-8000-000000000002"),
        at=T0,
        workflow_run_id=UUID("00000000-0000-4000-8000-000000000001"),
        task_key="crash",
        task_type="crash",
        depends_on=[],
        max_attempts=max_attempts,
        state=TaskRunState.READY,
        actor=task_run.ACTOR_USER,
        max_worker_losses=max_worker_losses,
    )
    task = event.mutate(None)
    assert isinstance(task, TaskRun)
    return task


class Clock:
    """The database's clock, moved by hand past each lease."""

    def __init__(self) -> None:
        self.at = T0

    def lose_worker(self, task: TaskRun) -> bool:
        """Claim the task and let its lease expire; whether the reaper reclaimed it."""
        assert task.claim("w", LEASE, at=self.at)
        self.at += LEASE + TICK
        return task.reclaim(at=self.at)

    def retry(self, task: TaskRun) -> None:
        assert task.schedule_retry(delay=timedelta(0), at=self.at, actor="scheduler")
        assert task.transition("retry_ready", at=self.at, actor="scheduler")


def test_below_the_bound_a_lost_worker_is_the_specs_reap_counted() -> None:
    task, clock = new_task(), Clock()
    for losses in (1, 2):
        assert clock.lose_worker(task)
        assert (task.state, task.worker_losses, task.attempt) == (TaskRunState.READY, losses, 1)
    events = task.collect_events()
    assert [type(e) for e in events] == [TaskRun.Claimed, TaskRun.LeaseReaped] * 2
    assert task.error is None


def test_at_the_default_bound_the_reaper_fails_the_attempt_with_worker_lost() -> None:
    task, clock = new_task(), Clock()
    for _ in range(lost_workers.DEFAULT_MAX_WORKER_LOSSES):
        assert clock.lose_worker(task)
    failed = task.collect_events()[-1]
    assert isinstance(failed, TaskRun.Failed)
    assert (failed.source, failed.state, failed.actor) == ("running", "failed", "reaper")
    assert (task.state, task.worker_losses, task.fencing_token) == (TaskRunState.FAILED, 3, 6)
    assert (task.lease_owner, task.lease_expires_at, task.finished_at) == (None, None, clock.at)
    assert task.error is not None and task.error["type"] == lost_workers.WORKER_LOST
    assert task.error["message"].startswith("lost its worker 3 times")


def test_after_the_bound_the_count_is_kept_so_each_retry_fails_on_its_first_loss() -> None:
    task, clock = new_task(max_attempts=3, max_worker_losses=2), Clock()
    assert clock.lose_worker(task)
    assert clock.lose_worker(task)
    assert task.state is TaskRunState.FAILED
    clock.retry(task)
    assert clock.lose_worker(task)
    assert (task.state, task.attempt, task.worker_losses) == (TaskRunState.FAILED, 2, 3)
    assert task.error is not None and "lost its worker 3 times" in task.error["message"]
    clock.retry(task)
    assert clock.lose_worker(task)
    assert (task.state, task.attempt) == (TaskRunState.FAILED, 3)
    assert not task.schedule_retry(delay=timedelta(0), at=clock.at, actor="scheduler")


def test_a_finish_does_not_count_as_a_lost_worker() -> None:
    task, clock = new_task(max_worker_losses=1), Clock()
    assert task.claim("w", LEASE, at=clock.at)
    assert task.finish("fail", 1, at=clock.at, actor="w", error={"type": "E"})
    assert task.worker_losses == 0
    clock.retry(task)
    assert clock.lose_worker(task)
    assert task.error is not None and task.error["type"] == lost_workers.WORKER_LOST


@settings(max_examples=100, deadline=None)
@given(
    bound=st.integers(min_value=1, max_value=6),
    max_attempts=st.integers(min_value=1, max_value=4),
    finishes=st.lists(st.booleans(), max_size=12),
)
def test_a_handler_that_always_kills_its_worker_ends_within_bound_plus_attempts_claims(
    bound: int, max_attempts: int, finishes: list[bool]
) -> None:
    """Whatever else happens (a worker that does finish, failing, now and then), a task
    whose worker keeps dying fails for good after at most ``bound + max_attempts - 1``
    lost workers: the crash loop ends. Every reclaim below the bound makes it ready;
    every one at or past it fails the attempt."""
    task, clock = new_task(max_attempts=max_attempts, max_worker_losses=bound), Clock()
    plan = iter(finishes)
    for _ in range(bound + 2 * max_attempts + len(finishes)):
        if task.state is TaskRunState.FAILED:
            if task.attempt >= max_attempts:
                break
            clock.retry(task)
        if next(plan, False):
            assert task.claim("w", LEASE, at=clock.at)
            assert task.finish("fail", task.fencing_token, at=clock.at, actor="w")
            continue
        before = task.worker_losses
        assert clock.lose_worker(task)
        expected = TaskRunState.FAILED if before + 1 >= bound else TaskRunState.READY
        assert (task.state, task.worker_losses) == (expected, before + 1)
    assert task.state is TaskRunState.FAILED and task.attempt == max_attempts
    assert task.worker_losses <= bound + max_attempts - 1


def test_old_events_without_the_bound_take_the_default() -> None:
    assert lost_workers.worker_losses_bound(None) == lost_workers.DEFAULT_MAX_WORKER_LOSSES
    assert lost_workers.worker_losses_bound(1) == 1


# --- the definition ---------------------------------------------------------------------


def definition(**fields: object) -> dict[str, object]:
    task = {"key": "a", "type": "t", **{k: v for k, v in fields.items() if k == "own"}}
    if "own" in task:
        task["max_worker_losses"] = task.pop("own")
    workflow = {k: v for k, v in fields.items() if k != "own"}
    return {"name": "w", "tasks": [task, {"key": "b", "type": "t"}], **workflow}


def test_the_bound_is_the_tasks_own_else_the_workflows_else_the_default() -> None:
    plain = parse_definition(definition())
    assert plain.max_worker_losses_for("a") == lost_workers.DEFAULT_MAX_WORKER_LOSSES
    both = parse_definition(definition(max_worker_losses=5, own=1))
    assert (both.max_worker_losses_for("a"), both.max_worker_losses_for("b")) == (1, 5)
    assert [t.max_worker_losses for t in planned_tasks(both)] == [1, 5]


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_a_bound_that_is_not_a_positive_whole_number_is_refused(value: object) -> None:
    with pytest.raises(InvalidWorkflowDefinitionError, match="max_worker_losses"):
        parse_definition(definition(max_worker_losses=value))
    with pytest.raises(InvalidWorkflowDefinitionError, match="max_worker_losses"):
        parse_definition(definition(own=value))
