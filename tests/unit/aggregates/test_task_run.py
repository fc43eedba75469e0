"""The TaskRun aggregate's pure commands, its events, and its reconstitution from them.

The commands take the database's clock as ``at``; here it is a fixed instant moved by
hand, so every lease and due time is exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowforge import errors
from flowforge.aggregates import task_run
from flowforge.aggregates.machines import FINISH_TRANSITIONS, TASK_RUN_MACHINE
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import TaskRun

T = TaskRunState
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TICK = timedelta(microseconds=1)
RUN_ID = UUID("00000000-0000-4000-8000-000000000001")
TASK_ID = UUID("00000000-0000-4000-8000-000000000002")
WORKER = "worker-1"


def created(
    state: TaskRunState = T.READY, max_attempts: int = 3, timeout_seconds: float | None = None
) -> TaskRun.Created:
    return task_run.created_event(
        TASK_ID,
        at=T0,
        workflow_run_id=RUN_ID,
        task_key="extract",
        task_type="extract",
        depends_on=[] if state is T.READY else ["upstream"],
        max_attempts=max_attempts,
        state=state,
        actor=task_run.ACTOR_USER,
        timeout_seconds=timeout_seconds,
    )


def new_task(
    state: TaskRunState = T.READY, max_attempts: int = 3, timeout_seconds: float | None = None
) -> TaskRun:
    task = created(state, max_attempts, timeout_seconds).mutate(None)
    assert isinstance(task, TaskRun)
    return task


def claimed(max_attempts: int = 3, at: datetime = T0) -> TaskRun:
    task = new_task(max_attempts=max_attempts)
    assert task.claim(WORKER, LEASE, at=at)
    task.collect_events()
    return task


def in_state(state: TaskRunState) -> TaskRun:
    """A task run brought to ``state`` by commands, its events already collected."""
    if state in (T.PENDING, T.READY):
        return new_task(state)
    if state is T.CANCELLED:
        task = new_task()
        assert task.transition("cancel_ready", at=T0, actor=task_run.ACTOR_USER)
    else:
        task = claimed()
        if state is not T.RUNNING:
            outcome = "succeed" if state is T.SUCCEEDED else "fail"
            assert task.finish(outcome, 1, at=T0, actor=WORKER, error=_error())
        if state is T.RETRYING:
            assert task.schedule_retry(delay=timedelta(minutes=1), at=T0, actor="scheduler")
    task.collect_events()
    assert task.state is state
    return task


def _error() -> dict[str, str]:
    return {"type": "RuntimeError", "message": "boom", "traceback": ""}


def only_event(task: TaskRun) -> Any:
    (event,) = task.collect_events()
    return event


def replay(creation: TaskRun.Created, events: Sequence[Any]) -> TaskRun:
    """A fresh aggregate built from the creation event and ``events`` alone."""
    aggregate = creation.mutate(None)
    for event in events:
        aggregate = event.mutate(aggregate)
    assert isinstance(aggregate, TaskRun)
    return aggregate


# --- creation -----------------------------------------------------------------------------


def test_a_new_task_run_has_token_zero_attempt_one_and_no_lease() -> None:
    task = new_task(T.PENDING)
    assert task.version == 1
    assert (task.state, task.fencing_token, task.attempt) == (T.PENDING, 0, 1)
    assert (task.lease_owner, task.lease_expires_at, task.started_at) == (None, None, None)
    assert task.depends_on == ["upstream"]


# --- claim ------------------------------------------------------------------------------


def test_a_claim_of_a_task_with_a_timeout_sets_its_deadline_from_at_and_a_finish_clears_it() -> (
    None
):
    task = new_task(timeout_seconds=90)
    assert task.claim(WORKER, LEASE, at=T0)
    assert only_event(task).deadline_at == T0 + timedelta(seconds=90)
    assert task.finish("succeed", 1, at=T0, actor=WORKER)
    assert (only_event(task).deadline_at, task.deadline_at) == (None, None)


def test_a_claim_of_a_task_without_a_timeout_has_no_deadline() -> None:
    task = claimed()
    assert task.deadline_at is None


# --- the execution timeout ----------------------------------------------------------------


def test_time_out_fails_the_attempt_past_its_deadline_with_a_timed_out_error() -> None:
    task = new_task(timeout_seconds=60)
    assert task.claim(WORKER, LEASE, at=T0)
    task.collect_events()
    assert task.time_out(1, at=T0 + timedelta(seconds=60) + TICK, actor="scheduler")
    event = only_event(task)
    assert isinstance(event, TaskRun.Failed)
    assert (task.state, task.lease_owner, task.deadline_at) == (T.FAILED, None, None)
    assert task.error is not None and task.error["type"] == task_run.TIMED_OUT
    assert "timeout of 60s" in task.error["message"]
    assert not task.finish("succeed", 1, at=T0, actor=WORKER)  # the worker's is stale


def test_time_out_before_the_deadline_or_with_another_token_returns_false() -> None:
    task = new_task(timeout_seconds=60)
    assert task.claim(WORKER, LEASE, at=T0)
    task.collect_events()
    assert not task.time_out(1, at=T0 + timedelta(seconds=60), actor="scheduler")
    assert not task.time_out(2, at=T0 + timedelta(hours=1), actor="scheduler")
    assert task.collect_events() == []
    assert task.state is T.RUNNING


def test_time_out_of_a_task_with_no_timeout_never_fires() -> None:
    task = claimed()
    assert not task.time_out(1, at=T0 + timedelta(days=365), actor="scheduler")
    assert task.collect_events() == []


def test_a_claim_moves_ready_to_running_with_token_plus_one_and_a_lease_from_at() -> None:
    task = new_task()
    assert task.claim(WORKER, LEASE, at=T0 + timedelta(seconds=5))
    event = only_event(task)
    assert isinstance(event, TaskRun.Claimed)
    assert (event.source, event.state, event.actor) == ("ready", "running", WORKER)
    assert task.state is T.RUNNING
    assert task.fencing_token == 1
    assert task.lease_owner == WORKER
    assert task.lease_expires_at == T0 + timedelta(seconds=35)
    assert task.started_at == T0 + timedelta(seconds=5)
    assert task.version == 2


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.READY])
def test_a_claim_of_a_task_that_is_not_ready_returns_false_and_records_nothing(
    state: TaskRunState,
) -> None:
    task = in_state(state)
    before = task.snapshot()
    assert task.claim("worker-2", LEASE, at=T0 + timedelta(seconds=1)) is False
    assert task.collect_events() == []
    assert task.snapshot() == before


def test_a_second_claim_after_a_reap_keeps_the_first_started_at() -> None:
    task = claimed(at=T0)
    expired = T0 + LEASE + TICK
    assert task.reclaim(at=expired)
    assert task.claim("worker-2", LEASE, at=expired + timedelta(seconds=1))
    assert task.started_at == T0
    assert task.fencing_token == 3
    assert task.lease_expires_at == expired + timedelta(seconds=1) + LEASE


def test_a_claim_after_a_retry_keeps_the_first_started_at() -> None:
    task = claimed(at=T0)
    assert task.finish("fail", 1, at=T0 + timedelta(seconds=1), actor=WORKER, error=_error())
    assert task.schedule_retry(delay=timedelta(0), at=T0 + timedelta(seconds=2), actor="s")
    assert task.transition("retry_ready", at=T0 + timedelta(seconds=3), actor="s")
    assert task.claim(WORKER, LEASE, at=T0 + timedelta(seconds=4))
    assert task.started_at == T0
    assert (task.attempt, task.fencing_token) == (2, 2)


def test_claim_through_the_generic_transition_is_illegal_and_records_nothing() -> None:
    task = new_task()
    with pytest.raises(errors.IllegalTransitionError, match="claim"):
        task.transition("claim", at=T0, actor=WORKER)
    assert task.collect_events() == []
    assert task.state is T.READY


# --- finish -------------------------------------------------------------------------------


def test_succeed_with_the_current_token_records_the_result_and_frees_the_lease() -> None:
    task = claimed()
    done = T0 + timedelta(seconds=3)
    assert task.finish("succeed", 1, at=done, actor=WORKER, result={"rows": 3}, error=_error())
    event = only_event(task)
    assert isinstance(event, TaskRun.Succeeded)
    assert task.state is T.SUCCEEDED
    assert (task.lease_owner, task.lease_expires_at) == (None, None)
    assert task.finished_at == done
    assert task.result == {"rows": 3}
    assert task.error is None  # an error passed with a success is not recorded
    assert task.fencing_token == 1


def test_fail_records_the_error_and_not_a_result() -> None:
    task = claimed()
    assert task.finish("fail", 1, at=T0, actor=WORKER, result="ignored", error=_error())
    assert isinstance(only_event(task), TaskRun.Failed)
    assert (task.state, task.result, task.error) == (T.FAILED, None, _error())
    assert task.finished_at == T0
    assert task.lease_expires_at is None


def test_cancel_running_records_neither_result_nor_error() -> None:
    task = claimed()
    assert task.finish("cancel_running", 1, at=T0, actor="scheduler", result=1, error=_error())
    assert isinstance(only_event(task), TaskRun.RunningCancelled)
    assert (task.state, task.result, task.error) == (T.CANCELLED, None, None)
    assert task.lease_expires_at is None


@pytest.mark.parametrize("outcome", sorted(FINISH_TRANSITIONS))
def test_a_finish_with_a_stale_token_returns_false_and_records_nothing(outcome: str) -> None:
    task = claimed(at=T0)
    expired = T0 + LEASE + TICK
    assert task.reclaim(at=expired)
    assert task.claim("worker-2", LEASE, at=expired)
    task.collect_events()
    assert task.fencing_token == 3  # claim, reap, claim
    before = task.snapshot()
    for stale in (1, 2, 4):  # the first claim's, the reap's, and one not yet issued
        assert task.finish(outcome, stale, at=expired, actor=WORKER, result="late") is False
        assert task.collect_events() == []
        assert task.snapshot() == before


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.RUNNING])
def test_a_finish_of_a_task_that_is_not_running_returns_false(state: TaskRunState) -> None:
    task = in_state(state)
    before = task.snapshot()
    assert task.finish("succeed", task.fencing_token, at=T0, actor=WORKER) is False
    assert task.collect_events() == []
    assert task.snapshot() == before


@pytest.mark.parametrize(
    "outcome", [*sorted({t.name for t in TASK_RUN_MACHINE} - FINISH_TRANSITIONS), "done"]
)
def test_finish_refuses_any_outcome_but_succeed_fail_or_cancel_running(outcome: str) -> None:
    task = claimed()
    with pytest.raises(errors.IllegalTransitionError, match=repr(outcome)):
        task.finish(outcome, 1, at=T0 + LEASE + TICK, actor=WORKER)
    assert task.collect_events() == []
    assert task.state is T.RUNNING


# --- legality: raised before any event ------------------------------------------------


@pytest.mark.parametrize("name", sorted(FINISH_TRANSITIONS))
def test_transition_rule_refuses_a_lease_spending_edge(name: str) -> None:
    with pytest.raises(errors.LeaseRequiredError, match="finish_task_run") as caught:
        task_run.transition_rule(name)
    assert caught.value.transition == name


def test_transition_rule_refuses_the_reapers_edge() -> None:
    with pytest.raises(errors.ReaperOnlyTransitionError, match="reclaim_task_run"):
        task_run.transition_rule("reap_lease")


def test_transition_rule_refuses_a_name_not_in_the_table() -> None:
    with pytest.raises(errors.IllegalTransitionError) as caught:
        task_run.transition_rule("start")  # a WorkflowRun edge
    assert caught.value.transition == "start"


def test_transition_rule_refuses_the_reruns_edge() -> None:
    with pytest.raises(errors.RerunOnlyTransitionError, match="rerun_workflow_run"):
        task_run.transition_rule("carry_over")


def test_transition_rule_returns_every_other_edge() -> None:
    others = {t.name for t in TASK_RUN_MACHINE} - FINISH_TRANSITIONS
    others -= {"reap_lease", "carry_over"}
    assert len(others) == 8
    for name in others:
        assert task_run.transition_rule(name) is TASK_RUN_MACHINE.get(name)


def test_finish_rule_returns_exactly_the_lease_spending_edges() -> None:
    for name in FINISH_TRANSITIONS:
        assert task_run.finish_rule(name) is TASK_RUN_MACHINE.get(name)


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("succeed", errors.LeaseRequiredError),
        ("fail", errors.LeaseRequiredError),
        ("cancel_running", errors.LeaseRequiredError),
        ("reap_lease", errors.ReaperOnlyTransitionError),
        ("carry_over", errors.RerunOnlyTransitionError),
        ("claim", errors.IllegalTransitionError),
        ("cancel", errors.IllegalTransitionError),
        ("renew_lease", errors.IllegalTransitionError),
    ],
)
def test_an_illegal_transition_raises_before_any_event_even_from_its_source_state(
    name: str, error: type[errors.DomainError]
) -> None:
    # Running, with an expired lease: the edge's source state and condition both hold,
    # so only the legality check can stop it.
    task = claimed()
    before = task.snapshot()
    with pytest.raises(error):
        task.transition(name, at=T0 + LEASE + TICK, actor=task_run.ACTOR_USER)
    assert task.collect_events() == []
    assert task.snapshot() == before


# --- a rerun's carry-over ---------------------------------------------------------------

SOURCE = task_run.Provenance(
    UUID("00000000-0000-4000-8000-0000000000a1"), UUID("00000000-0000-4000-8000-0000000000b2"), 2
)


def test_carry_over_moves_a_pending_task_to_succeeded_with_the_result_and_its_source() -> None:
    task = new_task(T.PENDING)
    assert task.carry_over({"rows": 8}, SOURCE, at=T0, actor=task_run.ACTOR_USER)
    (event,) = task.collect_events()
    assert isinstance(event, TaskRun.ResultCarriedOver)
    assert (event.source, event.state) == ("pending", "succeeded")
    assert task.state is T.SUCCEEDED
    assert task.result == {"rows": 8}
    assert task.finished_at == T0
    assert task.started_at is None  # it did not run here
    assert (task.carried_from_run_id, task.carried_from_task_run_id) == (
        SOURCE.run_id,
        SOURCE.task_run_id,
    )
    assert task.carried_from_attempt == 2
    assert (task.attempt, task.fencing_token) == (1, 0)


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.PENDING])
def test_carry_over_of_a_task_that_is_not_pending_returns_false(state: TaskRunState) -> None:
    task = in_state(state)
    assert not task.carry_over(1, SOURCE, at=T0, actor=task_run.ACTOR_USER)
    assert task.collect_events() == []


def test_a_carried_over_task_replays_from_its_two_events() -> None:
    task = new_task(T.PENDING)
    assert task.carry_over([1, 2], SOURCE, at=T0, actor=task_run.ACTOR_USER)
    (event,) = task.collect_events()
    assert replay(created(T.PENDING), [event]).snapshot() == task.snapshot()


# --- the moves that need no lease -----------------------------------------------------


@pytest.mark.parametrize(
    ("start", "name", "target", "event_class"),
    [
        (T.PENDING, "dependencies_satisfied", T.READY, TaskRun.DependenciesSatisfied),
        (T.PENDING, "cancel_pending", T.CANCELLED, TaskRun.PendingCancelled),
        (T.READY, "cancel_ready", T.CANCELLED, TaskRun.ReadyCancelled),
    ],
)
def test_a_move_from_its_source_state_takes_the_edge(
    start: TaskRunState, name: str, target: TaskRunState, event_class: type[Any]
) -> None:
    task = new_task(start)
    at = T0 + timedelta(seconds=9)
    assert task.transition(name, at=at, actor="scheduler")
    event = only_event(task)
    assert type(event) is event_class
    assert (event.source, event.state, event.actor) == (start, target, "scheduler")
    assert task.state is target
    assert task.finished_at == (at if TASK_RUN_MACHINE.is_terminal(target) else None)


@pytest.mark.parametrize("name", ["dependencies_satisfied", "cancel_pending", "cancel_ready"])
def test_a_move_from_another_state_loses_and_records_nothing(name: str) -> None:
    source = TASK_RUN_MACHINE.get(name).source
    for state in TaskRunState:
        if state is source:
            continue
        task = in_state(state)
        before = task.snapshot()
        assert task.transition(name, at=T0, actor="scheduler") is False, state
        assert task.collect_events() == []
        assert task.snapshot() == before


# --- the reaper -------------------------------------------------------------------------


def test_reclaim_refuses_a_lease_that_has_not_expired_yet() -> None:
    task = claimed(at=T0)
    assert task.reclaim(at=T0) is False
    assert task.reclaim(at=T0 + LEASE) is False  # expires_at < at, strictly
    assert task.collect_events() == []
    assert task.state is T.RUNNING


def test_reclaim_after_expiry_makes_the_task_ready_with_token_plus_one_and_no_lease() -> None:
    task = claimed(at=T0)
    assert task.reclaim(at=T0 + LEASE + TICK)
    event = only_event(task)
    assert isinstance(event, TaskRun.LeaseReaped)
    assert (event.source, event.state, event.actor) == ("running", "ready", "reaper")
    assert (task.state, task.fencing_token) == (T.READY, 2)
    assert (task.lease_owner, task.lease_expires_at) == (None, None)
    assert task.started_at == T0
    assert task.attempt == 1  # a reaped lease is not a failed attempt


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.RUNNING])
def test_reclaim_of_a_task_that_is_not_running_returns_false(state: TaskRunState) -> None:
    task = in_state(state)
    assert task.reclaim(at=T0 + timedelta(days=1)) is False
    assert task.collect_events() == []


def test_a_renewed_lease_is_not_reclaimed_at_the_old_expiry() -> None:
    task = claimed(at=T0)
    assert task.renew_lease(1, LEASE, at=T0 + timedelta(seconds=20), actor=WORKER)
    assert task.reclaim(at=T0 + LEASE + TICK) is False
    assert task.reclaim(at=T0 + timedelta(seconds=50) + TICK)


# --- retries ------------------------------------------------------------------------------


def test_schedule_retry_increments_the_attempt_and_clears_finished_at_and_the_lease() -> None:
    task = in_state(T.FAILED)
    failed_at = task.snapshot()["finished_at"]
    assert failed_at == T0
    at = T0 + timedelta(seconds=10)
    assert task.schedule_retry(delay=timedelta(seconds=4), at=at, actor="scheduler")
    event = only_event(task)
    assert isinstance(event, TaskRun.RetryScheduled)
    assert (event.source, event.state) == ("failed", "retrying")
    assert (task.state, task.attempt) == (T.RETRYING, 2)
    assert (task.finished_at, task.lease_owner, task.lease_expires_at) == (None, None, None)
    assert task.retry_due_at == at + timedelta(seconds=4)
    assert task.started_at == T0
    assert task.fencing_token == 1


def test_schedule_retry_refuses_when_the_attempts_are_exhausted() -> None:
    task = claimed(max_attempts=2)
    assert task.finish("fail", 1, at=T0, actor=WORKER, error=_error())
    assert task.schedule_retry(delay=timedelta(0), at=T0, actor="scheduler")
    assert task.transition("retry_ready", at=T0, actor="scheduler")
    assert task.claim(WORKER, LEASE, at=T0)
    assert task.finish("fail", 2, at=T0, actor=WORKER, error=_error())
    task.collect_events()
    before = task.snapshot()
    assert task.schedule_retry(delay=timedelta(0), at=T0, actor="scheduler") is False
    assert task.transition("schedule_retry", at=T0, actor="scheduler") is False
    assert task.collect_events() == []
    assert task.snapshot() == before
    assert (task.state, task.attempt) == (T.FAILED, 2)


def test_a_task_with_one_attempt_is_never_retried() -> None:
    task = claimed(max_attempts=1)
    assert task.finish("fail", 1, at=T0, actor=WORKER, error=_error())
    assert task.schedule_retry(delay=timedelta(0), at=T0, actor="scheduler") is False


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.FAILED])
def test_schedule_retry_of_a_task_that_has_not_failed_returns_false(
    state: TaskRunState,
) -> None:
    task = in_state(state)
    assert task.schedule_retry(delay=timedelta(0), at=T0, actor="scheduler") is False
    assert task.collect_events() == []


def test_schedule_retry_through_the_generic_transition_is_due_at_once() -> None:
    task = in_state(T.FAILED)
    at = T0 + timedelta(seconds=2)
    assert task.transition("schedule_retry", at=at, actor="scheduler")
    assert (task.state, task.retry_due_at) == (T.RETRYING, at)


def test_retry_ready_waits_until_the_retry_is_due() -> None:
    task = in_state(T.RETRYING)  # due one minute after T0
    due = T0 + timedelta(minutes=1)
    assert task.transition("retry_ready", at=due - TICK, actor="scheduler") is False
    assert task.collect_events() == []
    assert task.transition("retry_ready", at=due, actor="scheduler")
    assert isinstance(only_event(task), TaskRun.RetryReady)
    assert (task.state, task.retry_due_at) == (T.READY, None)
    assert task.attempt == 2


def test_a_retry_is_due_from_its_due_time_on_and_at_once_without_one() -> None:
    # The one rule both the aggregate's retry_ready and the scheduler's advance ask.
    assert not task_run.is_due(T0, T0 - TICK)
    assert task_run.is_due(T0, T0)
    assert task_run.is_due(None, T0)


# --- heartbeats ---------------------------------------------------------------------------


def test_renew_lease_with_the_current_token_extends_the_lease_from_at() -> None:
    task = claimed(at=T0)
    at = T0 + timedelta(seconds=10)
    assert task.renew_lease(1, timedelta(seconds=60), at=at, actor=WORKER)
    event = only_event(task)
    assert isinstance(event, TaskRun.LeaseRenewed)
    assert (event.source, event.state, event.actor) == ("running", "running", WORKER)
    assert task.lease_expires_at == at + timedelta(seconds=60)
    assert (task.state, task.fencing_token, task.version) == (T.RUNNING, 1, 3)


def test_renew_lease_with_a_stale_token_returns_false_and_records_nothing() -> None:
    task = claimed(at=T0)
    assert task.reclaim(at=T0 + LEASE + TICK)
    assert task.claim("worker-2", LEASE, at=T0 + LEASE + TICK)
    task.collect_events()
    before = task.snapshot()
    assert task.renew_lease(1, LEASE, at=T0 + LEASE + TICK, actor=WORKER) is False
    assert task.collect_events() == []
    assert task.snapshot() == before


@pytest.mark.parametrize("state", [s for s in TaskRunState if s is not T.RUNNING])
def test_renew_lease_of_a_task_that_is_not_running_returns_false(state: TaskRunState) -> None:
    task = in_state(state)
    assert task.renew_lease(task.fencing_token, LEASE, at=T0, actor=WORKER) is False
    assert task.collect_events() == []


def test_a_heartbeat_does_not_make_the_finish_that_follows_it_lose() -> None:
    task = claimed(at=T0)
    assert task.renew_lease(1, LEASE, at=T0 + timedelta(seconds=1), actor=WORKER)
    assert task.finish("succeed", 1, at=T0 + timedelta(seconds=2), actor=WORKER)
    assert task.state is T.SUCCEEDED
    assert task.lease_expires_at is None


# --- events and edges ---------------------------------------------------------------------


def transitioned_classes() -> list[type[TaskRun.Transitioned]]:
    return [
        cls
        for cls in vars(TaskRun).values()
        if isinstance(cls, type)
        and issubclass(cls, TaskRun.Transitioned)
        and cls is not TaskRun.Transitioned
    ]


def test_every_edge_has_exactly_one_event_class_named_for_it() -> None:
    assert set(task_run.EVENT_FOR_TRANSITION) == {t.name for t in TASK_RUN_MACHINE}
    for name, cls in task_run.EVENT_FOR_TRANSITION.items():
        assert name == cls.TRANSITION
    assert len(set(task_run.EVENT_FOR_TRANSITION.values())) == len(TASK_RUN_MACHINE)


def test_every_event_class_but_the_heartbeat_maps_to_exactly_one_edge() -> None:
    classes = transitioned_classes()
    assert len(classes) == len(TASK_RUN_MACHINE) + 1
    for cls in classes:
        if cls is TaskRun.LeaseRenewed:
            assert cls.TRANSITION not in TASK_RUN_MACHINE
            continue
        assert task_run.EVENT_FOR_TRANSITION[cls.TRANSITION] is cls


def test_the_event_built_from_a_returned_row_equals_the_pure_commands_event() -> None:
    task = new_task()
    assert task.claim(WORKER, LEASE, at=T0)
    pure = only_event(task)
    row = {**task.snapshot(), "updated_at": T0}
    built = task_run.event_from_row(TaskRun.Claimed, row, source="ready", actor=WORKER)
    assert built == pure


# --- reconstitution -------------------------------------------------------------------


def test_replaying_a_lifecycles_events_rebuilds_an_equal_task_run() -> None:
    creation = created()
    task = creation.mutate(None)
    assert isinstance(task, TaskRun)
    at = T0
    assert task.claim(WORKER, LEASE, at=at)
    at += LEASE + TICK
    assert task.reclaim(at=at)
    assert task.claim("worker-2", LEASE, at=at)
    assert task.renew_lease(3, LEASE, at=at + timedelta(seconds=5), actor="worker-2")
    assert task.finish("fail", 3, at=at + timedelta(seconds=6), actor="worker-2", error=_error())
    assert task.schedule_retry(delay=timedelta(seconds=1), at=at + timedelta(seconds=7), actor="s")
    assert task.transition("retry_ready", at=at + timedelta(seconds=8), actor="s")
    assert task.claim("worker-3", LEASE, at=at + timedelta(seconds=9))
    assert task.finish("succeed", 4, at=at + timedelta(seconds=10), actor="w", result=[1])
    events = task.collect_events()
    assert len(events) == 9
    rebuilt = replay(creation, events)
    assert rebuilt.snapshot() == task.snapshot()
    assert rebuilt == task
    assert rebuilt.version == 10


def test_replaying_an_event_whose_source_is_not_the_current_state_is_corrupt() -> None:
    creation = created()
    task = creation.mutate(None)
    assert isinstance(task, TaskRun)
    assert task.claim(WORKER, LEASE, at=T0)
    (claim,) = task.collect_events()
    forged = dataclasses.replace(claim, source="pending")
    with pytest.raises(errors.CorruptEventLogError, match="'claim' from 'pending'") as caught:
        replay(creation, [forged])
    assert "'ready'" in str(caught.value)


def test_replaying_a_forged_claim_that_lands_in_succeeded_is_corrupt_and_names_the_event() -> None:
    # The source is right (ready) and the class is a real edge; only the target is
    # forged. Checking the source alone would replay it into a succeeded task.
    creation = created()
    task = new_task()
    assert task.claim(WORKER, LEASE, at=T0)
    claim = only_event(task)
    forged = dataclasses.replace(claim, state="succeeded")
    with pytest.raises(errors.CorruptEventLogError) as caught:
        replay(creation, [forged])
    message = str(caught.value)
    assert "TaskRun.Claimed" in message
    assert str(TASK_ID) in message
    assert "v2" in message
    assert "'ready' -> 'succeeded'" in message
    assert "'claim' is 'ready' -> 'running'" in message


def test_replaying_a_heartbeat_that_changes_the_state_is_corrupt() -> None:
    creation = created()
    task = new_task()
    assert task.claim(WORKER, LEASE, at=T0)
    claim = only_event(task)
    assert task.renew_lease(1, LEASE, at=T0 + TICK, actor=WORKER)
    forged = dataclasses.replace(only_event(task), state="succeeded")
    with pytest.raises(errors.CorruptEventLogError, match=r"TaskRun.LeaseRenewed .* v3"):
        replay(creation, [claim, forged])


def test_replay_checks_every_edge_of_the_table_against_its_own_source_and_target() -> None:
    # Every event class, replayed with each wrong target, is refused; its own passes.
    for edge in TASK_RUN_MACHINE:
        event_class = task_run.EVENT_FOR_TRANSITION[edge.name]
        for target in T:
            fields: dict[str, Any] = dict.fromkeys(task_run.MUTABLE_FIELDS)
            fields.update(
                state=target.value,
                fencing_token=0,
                attempt=1,
                originator_id=TASK_ID,
                originator_version=2,
                timestamp=T0,
                source=edge.source.value,
                actor=WORKER,
            )
            event = event_class(**fields)
            if target == edge.target:
                task_run.check_replayable(event)
            else:
                with pytest.raises(errors.CorruptEventLogError, match=edge.name):
                    task_run.check_replayable(event)


def test_replaying_an_event_that_skips_an_edge_is_corrupt() -> None:
    # A log with "succeed" but no "claim": the event claims running, the run is ready.
    creation = created()
    task = claimed()
    assert task.finish("succeed", 1, at=T0, actor=WORKER)
    succeeded = dataclasses.replace(only_event(task), originator_version=2)
    with pytest.raises(errors.CorruptEventLogError, match="'succeed' from 'running'"):
        replay(creation, [succeeded])


# --- any sequence of commands keeps the invariants ------------------------------------

NAMES = sorted(t.name for t in TASK_RUN_MACHINE)
EXPECTED_REFUSAL: dict[str, type[errors.DomainError]] = {
    **dict.fromkeys(FINISH_TRANSITIONS, errors.LeaseRequiredError),
    "reap_lease": errors.ReaperOnlyTransitionError,
    "carry_over": errors.RerunOnlyTransitionError,
    "claim": errors.IllegalTransitionError,
    "no_such_edge": errors.IllegalTransitionError,
}
Command = tuple[Any, ...]
seconds = st.integers(min_value=0, max_value=45)
#: Any command at all: most of them lose, are stale or are illegal in a given state.
any_command: st.SearchStrategy[Command] = st.one_of(
    st.tuples(st.just("wait"), seconds),
    st.tuples(st.just("transition"), st.sampled_from([*NAMES, "no_such_edge"])),
    st.tuples(st.just("claim"), st.integers(min_value=1, max_value=40)),
    st.tuples(st.just("finish"), st.sampled_from(sorted(FINISH_TRANSITIONS)), st.integers(-1, 1)),
    st.tuples(st.just("renew"), st.integers(-1, 1), st.integers(min_value=1, max_value=40)),
    st.tuples(st.just("reclaim")),
    st.tuples(st.just("schedule_retry"), seconds),
)
#: Commands likely to take an edge from each state, so that sequences get deep (retries,
#: reaps, exhausted attempts) instead of losing at ``pending`` over and over.
PROGRESS: dict[TaskRunState, list[Command]] = {
    T.PENDING: [("transition", "dependencies_satisfied")] * 3 + [("transition", "cancel_pending")],
    T.READY: [("claim", 30)] * 3 + [("transition", "cancel_ready")],
    T.RUNNING: [
        ("finish", "succeed", 0),
        ("finish", "fail", 0),
        ("finish", "fail", 0),
        ("finish", "cancel_running", 0),
        ("renew", 0, 30),
        ("wait", 31),
        ("reclaim",),
    ],
    T.FAILED: [("schedule_retry", 5), ("transition", "schedule_retry")],
    T.RETRYING: [("wait", 5), ("transition", "retry_ready")],
    T.SUCCEEDED: [("wait", 1)],
    T.CANCELLED: [("wait", 1)],
}


def run_command(task: TaskRun, command: Command, at: datetime) -> bool:
    kind, *args = command
    if kind == "transition":
        return task.transition(args[0], at=at, actor="scheduler")
    if kind == "claim":
        return task.claim(WORKER, timedelta(seconds=args[0]), at=at)
    if kind == "finish":
        token = task.fencing_token + args[1]
        return task.finish(args[0], token, at=at, actor=WORKER, result=1, error=_error())
    if kind == "renew":
        token = task.fencing_token + args[0]
        return task.renew_lease(token, timedelta(seconds=args[1]), at=at, actor=WORKER)
    if kind == "reclaim":
        return task.reclaim(at=at)
    assert kind == "schedule_retry"
    return task.schedule_retry(delay=timedelta(seconds=args[0]), at=at, actor="scheduler")


def check_event_follows_the_table(event: Any) -> None:
    if isinstance(event, TaskRun.LeaseRenewed):
        assert event.source == event.state == T.RUNNING
        return
    edge = TASK_RUN_MACHINE.get(event.TRANSITION)
    assert type(event) is task_run.EVENT_FOR_TRANSITION[edge.name]
    assert (event.source, event.state) == (edge.source, edge.target)


def check_row_invariants(task: TaskRun) -> None:
    assert (task.state is T.RUNNING) == (task.lease_expires_at is not None)
    assert (task.state is T.RUNNING) == (task.lease_owner is not None)
    assert 1 <= task.attempt <= task.max_attempts
    assert (task.retry_due_at is not None) == (task.state is T.RETRYING)
    finished = task.state in (T.SUCCEEDED, T.FAILED, T.CANCELLED)
    assert (task.finished_at is not None) == finished


@settings(max_examples=100, deadline=None)
@given(
    start=st.sampled_from([T.PENDING, T.READY]),
    max_attempts=st.integers(min_value=1, max_value=4),
    length=st.integers(min_value=0, max_value=30),
    data=st.data(),
)
def test_any_sequence_of_commands_keeps_the_invariants(
    start: TaskRunState, max_attempts: int, length: int, data: st.DataObject
) -> None:
    creation = created(start, max_attempts)
    task = creation.mutate(None)
    assert isinstance(task, TaskRun)
    at = T0
    log: list[Any] = []
    for _ in range(length):
        step = data.draw(st.one_of(st.sampled_from(PROGRESS[task.state]), any_command))
        if step[0] == "wait":
            at += timedelta(seconds=step[1])
            continue
        before = task.snapshot()
        was_terminal = TASK_RUN_MACHINE.is_terminal(task.state)
        if step[0] == "transition" and step[1] in EXPECTED_REFUSAL:
            with pytest.raises(EXPECTED_REFUSAL[step[1]]):
                run_command(task, step, at)
            taken = False
        else:
            taken = run_command(task, step, at)
        events = task.collect_events()
        log.extend(events)

        # True means exactly one event; False means none, and no change at all.
        assert len(events) == int(taken)
        assert task.version == before["version"] + len(events)
        if not taken:
            assert task.snapshot() == before
        for event in events:
            check_event_follows_the_table(event)
        check_row_invariants(task)
        # The token never decreases, and rises by one exactly per claim or reap.
        bumps = taken and step[0] in ("claim", "reclaim")
        assert task.fencing_token == before["fencing_token"] + int(bumps)
        # started_at is the first claim's time, and never changes after it.
        if before["started_at"] is not None:
            assert task.started_at == before["started_at"]
        elif taken and step[0] == "claim":
            assert task.started_at == at
        else:
            assert task.started_at is None
        # A terminal state never changes again.
        if was_terminal:
            assert not taken

    assert replay(creation, log).snapshot() == task.snapshot()
