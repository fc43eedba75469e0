"""A run as of a past moment, replayed from audit entries (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from flowforge.app.results import AuditEntry
from flowforge.ui import replay

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
RUN, TASK = UUID(int=1), UUID(int=2)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run_entry(s: float, source: str | None, target: str) -> AuditEntry:
    return AuditEntry(at(s), "WorkflowRun", RUN, 1, "e", "t", source, target, "user")


def task_entry(
    s: float, source: str | None, target: str, attempt: int, worker: str | None = None
) -> AuditEntry:
    return AuditEntry(
        at(s), "TaskRun", TASK, 1, "e", "t", source, target, "w", "extract",
        attempt=attempt, lease_owner=worker,
    )  # fmt: skip


#: extract: created, claimed by w1, failed, retried, claimed by w2, succeeded.
LOG = [
    run_entry(0, None, "pending"),
    task_entry(0, None, "ready", 1),
    task_entry(1, "ready", "running", 1, "w1"),
    run_entry(1, "pending", "running"),
    task_entry(2, "running", "failed", 1),
    task_entry(3, "failed", "retrying", 2),
    task_entry(4, "retrying", "ready", 2),
    task_entry(5, "ready", "running", 2, "w2"),
    task_entry(7, "running", "succeeded", 2),
    run_entry(7, "running", "succeeded"),
]


def test_a_tasks_state_as_of_a_time_is_its_last_transitions_target() -> None:
    assert replay.task_states(LOG, at(-1)) == {}
    assert replay.task_states(LOG, at(1.5)) == {"extract": replay.TaskAsOf("running", 1)}
    assert replay.task_states(LOG, at(3)) == {"extract": replay.TaskAsOf("retrying", 2)}
    assert replay.task_states(LOG) == {"extract": replay.TaskAsOf("succeeded", 2)}


def test_the_runs_own_state_as_of_a_time() -> None:
    assert replay.run_state(LOG, at(-1)) is None
    assert replay.run_state(LOG, at(0.5)) == "pending"
    assert replay.run_state(LOG, at(6)) == "running"
    assert replay.run_state(LOG) == "succeeded"


def test_attempts_span_from_a_claim_to_the_transition_out_of_running() -> None:
    assert replay.attempts(LOG) == [
        replay.TimelineBar("extract", 1, at(1), at(2), "failed", "w1"),
        replay.TimelineBar("extract", 2, at(5), at(7), "succeeded", "w2"),
    ]


def test_an_attempt_running_as_of_a_time_has_no_end_yet() -> None:
    assert replay.attempts(LOG, at(6)) == [
        replay.TimelineBar("extract", 1, at(1), at(2), "failed", "w1"),
        replay.TimelineBar("extract", 2, at(5), None, None, "w2"),
    ]


def test_the_sliders_stops_are_the_distinct_transition_times() -> None:
    assert replay.moments(LOG) == [at(s) for s in (0, 1, 2, 3, 4, 5, 7)]


def test_waits_run_from_ready_or_retrying_to_the_next_claim() -> None:
    assert replay.waits(LOG) == [
        replay.Wait("extract", "ready", at(0), at(1)),
        replay.Wait("extract", "retrying", at(3), at(5)),  # its back-off, then the queue
    ]
    assert replay.waits(LOG, at(3.5)) == [
        replay.Wait("extract", "ready", at(0), at(1)),
        replay.Wait("extract", "retrying", at(3), None),  # still waiting then
    ]


def test_an_attempt_carries_the_error_it_ended_with() -> None:
    error = {"type": "ValueError", "message": "boom"}
    failed = AuditEntry(
        at(2), "TaskRun", TASK, 1, "e", "t", "running", "failed", "w", "extract",
        attempt=1, error=error,
    )  # fmt: skip
    log = [LOG[1], LOG[2], failed]
    assert replay.attempts(log)[0].error == error
