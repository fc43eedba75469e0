"""``flowforge why``'s explanations, case by case: pure, no database."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from flowforge.aggregates import task_run, workflow_run
from flowforge.app import results, why
from flowforge.app.ports import QueueState
from flowforge.cli import inspect
from flowforge.projections.tables import TaskRunRow
from tests.unit.aggregates.test_task_run import new_task

# --- why's cases that a short run does not reach (pure: no database) -------------------

AT = datetime(2026, 1, 31, 12, 3, 0, tzinfo=UTC)
RUN_ID = uuid.uuid5(uuid.NAMESPACE_DNS, "run")


def view(key: str, state: str, **fields: Any) -> why.TaskView:
    values: dict[str, Any] = {
        "id": uuid.uuid5(uuid.NAMESPACE_DNS, key),
        "workflow_run_id": RUN_ID,
        "task_key": key,
        "task_type": key,
        "depends_on": [],
        "state": state,
        "attempt": 1,
        "max_attempts": 3,
        "lease_seconds": 30.0,
        "timeout_seconds": None,
        "max_running": None,
        "max_worker_losses": None,
        "map_index": None,
        "map_item": None,
        "fencing_token": 0,
        "lease_owner": None,
        "lease_expires_at": None,
        "deadline_at": None,
        "started_at": None,
        "finished_at": None,
        "retry_due_at": None,
        "result": None,
        "error": None,
        "carried_from_run_id": None,
        "carried_from_task_run_id": None,
        "carried_from_attempt": None,
        "worker_losses": 0,
        **fields,
    }
    return why.TaskView(**values)


def situation(task: why.TaskView, *others: why.TaskView, **fields: Any) -> why.Situation:
    run_values: dict[str, Any] = {
        "id": RUN_ID,
        "workflow_name": "etl",
        "definition": {},
        "inputs": {},
        "idempotency_key": None,
        "rerun_of": None,
        "start_at": None,
        "trace_context": None,
        "state": "running",
        "started_at": AT - timedelta(minutes=1),
        "finished_at": None,
    }
    run = why.RunView(**run_values)
    values: dict[str, Any] = {
        "at": AT,
        "live": True,
        "task": task,
        "run": run,
        "siblings": {t.task_key: t for t in (task, *others)},
        "task_log": [],
        "run_log": [],
        "dispatches": [],
        **fields,
    }
    return why.Situation(**values)


def test_why_names_each_upstream_task_with_its_lease_or_retry() -> None:
    extract = view(
        "extract",
        "running",
        attempt=2,
        fencing_token=2,
        lease_owner="worker-1",
        lease_expires_at=AT + timedelta(seconds=4),
    )
    transform = view("transform", "pending")
    load = view("load", "pending", depends_on=("extract", "transform"))
    answer = why.explain(situation(load, extract, transform))
    assert answer.reason == "waiting_for_upstream"
    assert answer.headline == (
        "load is waiting for 2 upstream tasks: extract (running, attempt 2, lease held by "
        "worker-1 until 12:03:04Z), transform (pending)"
    )


def test_why_says_an_expired_lease_will_be_reaped() -> None:
    task = view(
        "extract",
        "running",
        fencing_token=3,
        lease_owner="worker-1",
        lease_expires_at=AT - timedelta(seconds=5),
    )
    answer = why.explain(situation(task))
    assert answer.reason == "lease_expired"
    assert "lease expired at 12:02:55Z (5.0s ago): the reaper will reclaim it" in answer.headline
    assert any("fencing token 4" in line for line in answer.details)


def test_why_says_a_published_dispatch_waits_for_a_worker() -> None:
    published = why.Dispatch(AT - timedelta(seconds=3), AT - timedelta(seconds=2), 0)
    answer = why.explain(situation(view("extract", "ready"), dispatches=[published]))
    assert answer.reason == "dispatch_published"
    assert "published at 12:02:58Z (2.0s ago) and no worker has claimed it" in answer.headline


def test_why_says_no_worker_consumes_the_queue_of_a_published_dispatch() -> None:
    published = why.Dispatch(AT - timedelta(seconds=3), AT - timedelta(seconds=2), 0)
    queue = QueueState(queue="flowforge.d.tasks.sleep", exists=True, messages=1, consumers=0)
    task = view("nap", "ready", task_type="sleep")
    answer = why.explain(situation(task, dispatches=[published], queue=queue))
    assert answer.reason == "no_consumer"
    assert answer.headline.endswith(
        "(2.0s ago), and no worker is consuming queue flowforge.d.tasks.sleep for type sleep"
    )
    assert answer.details[0] == "queue flowforge.d.tasks.sleep: 0 consumers, 1 waiting"
    assert "uses no attempt" in answer.details[1]


def test_why_counts_the_consumers_of_a_queue_that_has_some() -> None:
    published = why.Dispatch(AT - timedelta(seconds=3), AT - timedelta(seconds=2), 0)
    queue = QueueState(queue="q.extract", exists=True, messages=4, consumers=2)
    answer = why.explain(situation(view("extract", "ready"), dispatches=[published], queue=queue))
    assert answer.reason == "dispatch_published"
    assert answer.details[0] == "queue q.extract: 2 consumers, 4 waiting"


def test_why_says_a_task_behind_a_failed_one_will_not_run() -> None:
    error = {"type": "ValueError", "message": "bad row 7\nmore", "traceback": ""}
    extract = view("extract", "failed", attempt=3, error=error)
    load = view("load", "pending", depends_on=("extract",))
    answer = why.explain(situation(load, extract))
    assert answer.reason == "upstream_failed"
    assert answer.headline == (
        "load will not run: upstream 1 task extract (failed for good after 3 attempts: "
        "ValueError: bad row 7)"
    )


def test_why_says_a_due_retry_waits_for_a_scheduler() -> None:
    task = view(
        "extract",
        "retrying",
        attempt=2,
        retry_due_at=AT - timedelta(seconds=1),
        error={"type": "TimeoutError", "message": "slow"},
    )
    answer = why.explain(situation(task))
    assert answer.reason == "retry_due"
    assert answer.headline.startswith("extract is retrying: attempt 1 failed (TimeoutError: slow)")


# --- every declared field reaches why and the CLI without an edit ------------------------


def a_task_run_row() -> results.TaskRunView:
    task = new_task()
    row = TaskRunRow.from_mapping({**task.snapshot(), "created_at": AT, "updated_at": AT})
    return results.task_run_view(row)


def test_why_sees_every_declared_field_of_a_task_run_and_of_a_workflow_run() -> None:
    task_fields = {f.name for f in dataclasses.fields(why.TaskView)}
    run_fields = {f.name for f in dataclasses.fields(why.RunView)}

    assert set(task_run.DECLARATION.names) <= task_fields
    assert set(workflow_run.DECLARATION.names) <= run_fields


def test_status_json_shows_every_shown_field_of_a_task_run_under_its_label() -> None:
    fact = inspect.task_fact(a_task_run_row())

    for name, label in task_run.DECLARATION.shown.items():
        assert label in fact, f"{name} is declared shown but `status --json` lacks {label!r}"
    assert set(fact) == {"task_run_id", "duration_s", *task_run.DECLARATION.shown.values()}


def test_why_json_names_every_brief_field_of_each_upstream_task() -> None:
    upstream = view("extract", "running", lease_owner="worker-1")
    load = view("load", "pending", depends_on=["extract"])

    (fact,) = why.explain(situation(load, upstream)).upstream

    assert set(fact) == {"task_run_id", *task_run.DECLARATION.brief.values()}
    assert fact["lease_owner"] == "worker-1"


def test_why_says_a_carried_over_task_did_not_run_and_where_its_result_came_from() -> None:
    source_run, source_task = uuid.UUID(int=11), uuid.UUID(int=12)
    task = view(
        "extract",
        "succeeded",
        finished_at=AT,
        result={"rows": 8},
        carried_from_run_id=source_run,
        carried_from_task_run_id=source_task,
        carried_from_attempt=2,
    )
    answer = why.explain(situation(task))
    assert answer.reason == "succeeded"
    assert answer.headline.startswith("extract did not run in this run")
    assert f"from run {source_run}" in answer.headline
    assert f"task run {source_task} produced it on attempt 2" in answer.headline


def running(**fields: Any) -> why.TaskView:
    defaults: dict[str, Any] = {
        "lease_owner": "worker-1",
        "lease_expires_at": AT + timedelta(seconds=20),
        "started_at": AT - timedelta(minutes=5),
        "fencing_token": 1,
    }
    return view("slow", "running", **(defaults | fields))


def test_why_of_a_running_task_says_when_it_times_out() -> None:
    task = running(timeout_seconds=600.0, deadline_at=AT + timedelta(minutes=5))
    found = why.explain(situation(task))
    assert found.reason == "running"
    assert any("times out at" in line and "timeout 10m00s" in line for line in found.details)


def test_why_of_a_running_task_past_its_deadline_says_it_timed_out() -> None:
    task = running(timeout_seconds=60.0, deadline_at=AT - timedelta(seconds=3))
    found = why.explain(situation(task))
    assert found.reason == "timed_out"
    assert "past its timeout of 1m00s" in found.headline
    assert "a scheduler fails it" in found.headline


def test_why_of_a_long_running_task_without_a_timeout_says_how_long_and_that_none_is_set() -> None:
    found = why.explain(situation(running()))
    assert found.reason == "running"
    (line,) = [d for d in found.details if "no timeout is set" in d]
    assert "has run for 5m00s" in line


def expired(**fields: Any) -> why.TaskView:
    return view(
        "slow",
        "running",
        lease_owner="worker-1",
        lease_expires_at=AT - timedelta(seconds=5),
        fencing_token=1,
        **fields,
    )


def test_why_of_an_expired_lease_below_the_bound_counts_the_lost_worker() -> None:
    found = why.explain(situation(expired(worker_losses=1)))
    assert found.reason == "lease_expired"
    (line,) = [d for d in found.details if "died or stalled" in d]
    assert "(lost worker 2 of at most 3)" in line
    assert "back to ready with fencing token 2" in line


def test_why_of_an_expired_lease_at_the_bound_says_the_reaper_fails_the_attempt() -> None:
    found = why.explain(situation(expired(worker_losses=1, max_worker_losses=2)))
    (line,) = [d for d in found.details if "died or stalled" in d]
    assert "will have lost its worker 2 times (max_worker_losses = 2)" in line
    assert "fails the attempt (WorkerLost) and the retry policy applies" in line


def test_why_of_a_running_task_that_lost_its_worker_before_says_so() -> None:
    assert not [d for d in why.explain(situation(running())).details if "lost its" in d]
    found = why.explain(situation(running(worker_losses=2)))
    assert found.reason == "running"
    assert "it lost its worker 2 times before (max_worker_losses = 3" in "\n".join(found.details)


def claimed_at(at: datetime) -> results.AuditEntry:
    task = running()
    return results.AuditEntry(
        at, "task_run", task.id, 2, "Claimed", "claim", "ready", "running", "worker-1"
    )


def test_why_of_a_running_task_whose_heartbeat_renews_it_says_so() -> None:
    # Claimed 15 s ago with a 30 s lease: its first renewal (at 10 s) is late, not missed.
    found = why.explain(situation(running(), task_log=[claimed_at(AT - timedelta(seconds=15))]))
    assert any("the worker's heartbeat renews the lease" in d for d in found.details)


def test_why_of_a_lease_nobody_renews_does_not_claim_a_heartbeat_renews_it() -> None:
    """Issue #49: a task left by an exited `flowforge run` keeps its lease until it runs
    out; `why` said its heartbeat renewed it."""
    task = running(lease_expires_at=AT + timedelta(seconds=5))
    claimed = claimed_at(AT - timedelta(seconds=25))
    found = why.explain(situation(task, task_log=[claimed], embedded=True))
    assert found.reason == "running"
    text = "\n".join(found.details)
    assert "heartbeat renews" not in text
    assert "no heartbeat since 12:02:35Z (25.0s ago; one is due every 10.0s)" in text
    assert "worker-1 has stopped or stalled, and the lease runs out at 12:03:05Z" in text
    assert f"`flowforge run --resume {RUN_ID} --tasks MODULE` runs it" in text


# --- a delayed run (flowforge submit --at/--in) ------------------------------------------


def run_as(s: why.Situation, **fields: Any) -> why.RunView:
    return dataclasses.replace(s.run, **fields)


def delayed(
    start_at: datetime, task: why.TaskView, *others: why.TaskView, **fields: Any
) -> why.Situation:
    """A situation in a delayed run that has not started."""
    s = situation(task, *others, **fields)
    return dataclasses.replace(
        s, run=run_as(s, state="pending", started_at=None, start_at=start_at)
    )


def test_why_says_a_task_of_a_delayed_run_waits_for_its_start_time() -> None:
    start_at = AT + timedelta(minutes=10)
    root = view("extract", "pending", started_at=None)
    answer = why.explain(delayed(start_at, root))
    assert answer.reason == "waiting_for_start_time"
    assert answer.headline == (
        "extract is waiting for its run's start time: the run starts at 12:13:00Z (in 10m00s)"
    )
    assert any("2026-01-31T12:13:00.000000Z" in line for line in answer.details)
    assert any(f"flowforge cancel {RUN_ID}" in line for line in answer.details)
    # A downstream task waits for the same start time, then for its upstream.
    load = view("load", "pending", started_at=None, depends_on=("extract",))
    answer = why.explain(delayed(start_at, load, root))
    assert answer.reason == "waiting_for_start_time"
    assert answer.headline.endswith("; then it waits for its upstream: extract")


def test_why_says_a_delayed_run_whose_start_time_passed_is_started_on_the_next_pass() -> None:
    start_at = AT - timedelta(seconds=2)
    root = view("extract", "pending", started_at=None)
    answer = why.explain(delayed(start_at, root))
    assert answer.reason == "start_due"
    assert answer.headline == (
        "extract is waiting for its run's start time, 12:02:58Z (2.0s ago): a scheduler "
        "starts the run on its next pass"
    )
    embedded = why.explain(delayed(start_at, root, embedded=True))
    assert any("flowforge run --resume" in line for line in embedded.details)


def test_why_of_a_started_delayed_run_is_the_usual_answer() -> None:
    root = view("extract", "pending", started_at=None)
    started = delayed(AT - timedelta(minutes=1), root)
    answer = why.explain(dataclasses.replace(started, run=run_as(started, state="running")))
    assert answer.reason == "promotion_due"
