"""Every SQL guard equals its Python rule, for every (state, edge) pair of both machines.

A transition's guard is written twice: in the conditional write's WHERE clause
(``projections/sql``: ``state = :source``, the fencing token, the lease's expiry, the
deadline, a retry's due time, attempts left, a delayed run's start time) and in the
pure aggregates (``TaskRun.claim``, ``finish``, ``reclaim``, ...; ``WorkflowRun``'s
``transition`` with ``start_time.waits``). Here a row is put in each state (and on
each side of every extra condition) by the aggregate's own events, the edge's
conditional write runs on it through the store, and it must have matched a row iff the
aggregate, given the same database clock, takes the edge. Both backends.

The check is also run against a deliberately wrong guard (a fencing token left out of
``task_finish``, on SQLite), which it must catch: so it can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from flowforge import errors
from flowforge.aggregates import start_time
from flowforge.aggregates.base import event_from_row
from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import DECLARATION, Provenance, TaskRun, new_task_run
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app.service import FlowForge
from flowforge.projections import statements
from flowforge.projections.store import Store
from flowforge.projections.writes import MOVE_EDGES, Writes
from flowforge.projections.writes.tasks import PROMOTE

ACTOR = "guards"
#: Every lease, timeout and retry delay is an hour: a row made "an hour ago plus a bit"
#: (``STALE``) has an expired lease, an overdue deadline and a retry due; one made now
#: has none of them. Far from the boundary, so both clocks' readings agree.
HOUR = timedelta(hours=1)
STALE = timedelta(hours=2)
SOURCE = Provenance(uuid4(), uuid4(), 1)
LOST_STEP = timedelta(milliseconds=1)

edge = TASK_RUN_MACHINE.get
run_edge = WORKFLOW_RUN_MACHINE.get


# --- task runs: a row in each state, on each side of each condition ------------------------

#: A task run's way to each state it can be in, from its creation: (name, created in,
#: edges after it, max_attempts, made how long ago). Each condition's both sides: a lease
#: fresh and expired (with its deadline), attempts left and none, a retry due and not.
TASK_SITUATIONS: tuple[tuple[str, TaskRunState, tuple[str, ...], int, timedelta], ...] = (
    ("pending", TaskRunState.PENDING, (), 2, timedelta(0)),
    ("ready", TaskRunState.READY, (), 2, timedelta(0)),
    ("running", TaskRunState.READY, ("claim",), 2, timedelta(0)),
    ("running, lease expired, overdue", TaskRunState.READY, ("claim",), 2, STALE),
    # A worker lost too often (aggregates/lost_workers.py): two leases expired before,
    # and the third either held (the reaper must wait) or expired (at the default bound
    # of 3: the reaper's fail edge, not reap_lease).
    (
        "running, worker lost twice",
        TaskRunState.READY,
        ("lose_worker", "lose_worker", "claim"),
        2,
        timedelta(0),
    ),
    (
        "running, worker lost twice, lease expired",
        TaskRunState.READY,
        ("lose_worker", "lose_worker", "claim"),
        2,
        STALE,
    ),
    ("succeeded", TaskRunState.READY, ("claim", "succeed"), 2, timedelta(0)),
    ("failed, attempts left", TaskRunState.READY, ("claim", "fail"), 2, timedelta(0)),
    ("failed, no attempt left", TaskRunState.READY, ("claim", "fail"), 1, timedelta(0)),
    (
        "retrying, not due",
        TaskRunState.READY,
        ("claim", "fail", "schedule_retry"),
        2,
        timedelta(0),
    ),
    ("retrying, due", TaskRunState.READY, ("claim", "fail", "schedule_retry"), 2, STALE),
    ("cancelled", TaskRunState.PENDING, ("cancel_pending",), 2, timedelta(0)),
    ("carried over", TaskRunState.PENDING, ("carry_over",), 2, timedelta(0)),
    ("pending, its run's start time to come", TaskRunState.PENDING, (), 2, timedelta(0)),
    ("pending, its run's start time passed", TaskRunState.PENDING, (), 2, timedelta(0)),
)
#: The situations whose run is a pending delayed run, by its start time relative to now
#: (a promotion waits for it: ``task_move``'s run condition, ``start_time.waits``); every
#: other situation's run is running, undelayed.
RUN_START_OF_SITUATION: Mapping[str, timedelta] = {
    "pending, its run's start time to come": HOUR,
    "pending, its run's start time passed": -HOUR,
}


def task_in(
    situation: tuple[str, TaskRunState, tuple[str, ...], int, timedelta],
    now: datetime,
    run_id: UUID,
) -> TaskRun:
    """A task run in ``situation``, its events not yet collected: made by the aggregate's
    own commands, at ``now`` less the situation's age."""
    _, created_in, path, max_attempts, age = situation
    at = now - age
    task = new_task_run(
        uuid4(),
        at=at,
        workflow_run_id=run_id,
        task_key="a",
        task_type="guarded",
        depends_on=[],
        max_attempts=max_attempts,
        state=created_in,
        actor=ACTOR,
        lease_seconds=HOUR.total_seconds(),
        timeout_seconds=HOUR.total_seconds(),
    )
    # Each lost worker: a claim with no lease, reclaimed a millisecond later, before
    # ``at`` (so the situation's own claim and age are as without them).
    lost_at = at - LOST_STEP * 2 * path.count("lose_worker")
    for name in path:
        if name == "lose_worker":
            assert task.claim("w0", timedelta(0), at=lost_at)
            lost_at += LOST_STEP
            assert task.reclaim(at=lost_at)
            lost_at += LOST_STEP
        elif name == "claim":
            assert task.claim("w1", HOUR, at=at)
        elif name in ("succeed", "fail"):
            assert task.finish(name, task.fencing_token, at=at, actor=ACTOR, result=1)
        elif name == "schedule_retry":
            assert task.schedule_retry(delay=HOUR, at=at, actor=ACTOR)
        elif name == "carry_over":
            assert task.carry_over({"r": 1}, SOURCE, at=at, actor=ACTOR)
        else:
            assert task.transition(name, at=at, actor=ACTOR)
    return task


@dataclass(frozen=True)
class Write:
    """One conditional write of a task run: the store's (did it match a row?) and the
    aggregate's rule (does it take the edge?), given the same task and clock."""

    name: str
    #: Whether it matched a row; for the reaper, the state it left the row in (its
    #: two edges, ready below the bound of lost workers and failed at it).
    sql: Callable[[Writes, TaskRun, datetime], bool | str]
    python: Callable[[TaskRun, datetime], bool | str]


def carry_over_sql(writes: Writes, task: TaskRun, at: datetime) -> bool:
    """The rerun's edge has no statement of its own: its event is applied to the row as
    the rebuild applies it (``apply_task_run_event``: the row's version and source state
    are the guard), and a row it does not follow raises."""
    row = writes.task_run(task.id)
    assert row is not None
    values = {**row.values(), "version": row.version + 1, "updated_at": at}
    values.update(state="succeeded", finished_at=at, result={"r": 1})
    event = event_from_row(
        DECLARATION, TaskRun.ResultCarriedOver, values, source="pending", actor=ACTOR
    )
    try:
        writes.tasks.carry_over(event)
    except errors.CorruptEventLogError:
        return False
    return True


def reclaim_sql(writes: Writes, task: TaskRun, _: datetime) -> bool | str:
    row = writes.tasks.reclaim(task.id, actor=ACTOR)
    return row is not None and row.state


def move(name: str) -> Write:
    return Write(
        name,
        lambda w, t, _: w.tasks.move(t.id, edge(name), actor=ACTOR) is not None,
        lambda t, at: t.transition(name, at=at, actor=ACTOR),
    )


def finish(name: str, token_offset: int) -> Write:
    """A finish under the row's token, a stale one (-1) or one never issued (+1)."""
    return Write(
        f"{name}, token {token_offset:+d}",
        lambda w, t, _: (
            w.tasks.finish(t.id, edge(name), t.fencing_token + token_offset, actor=ACTOR)
            is not None
        ),
        lambda t, at: t.finish(name, t.fencing_token + token_offset, at=at, actor=ACTOR),
    )


def time_out(token_offset: int) -> Write:
    error = {"type": "TimedOut", "message": "m", "traceback": ""}
    return Write(
        f"time_out, token {token_offset:+d}",
        lambda w, t, _: (
            w.tasks.time_out(t.id, t.fencing_token + token_offset, error, actor=ACTOR) is not None
        ),
        lambda t, at: t.time_out(t.fencing_token + token_offset, at=at, actor=ACTOR),
    )


def renew(token_offset: int) -> Write:
    seconds = HOUR.total_seconds()
    return Write(
        f"renew_lease, token {token_offset:+d}",
        lambda w, t, _: (
            w.tasks.renew_lease(t.id, t.fencing_token + token_offset, seconds, actor=ACTOR)
            is not None
        ),
        lambda t, at: t.renew_lease(t.fencing_token + token_offset, HOUR, at=at, actor=ACTOR),
    )


TASK_WRITES: tuple[Write, ...] = (
    *(move(name) for name in sorted(MOVE_EDGES)),
    Write(
        "claim",
        lambda w, t, _: w.tasks.claim(t.id, "w2", HOUR.total_seconds()) is not None,
        lambda t, at: t.claim("w2", HOUR, at=at),
    ),
    *(
        finish(name, offset)
        for name in ("succeed", "fail", "cancel_running")
        for offset in (0, -1, 1)
    ),
    *(time_out(offset) for offset in (0, -1, 1)),
    *(renew(offset) for offset in (0, -1, 1)),
    Write("reap_lease", reclaim_sql, lambda t, at: t.reclaim(at=at) and str(t.state)),
    Write(
        "schedule_retry",
        lambda w, t, _: w.tasks.schedule_retry(t.id, 0.0, actor=ACTOR) is not None,
        lambda t, at: t.schedule_retry(delay=timedelta(0), at=at, actor=ACTOR),
    ),
    Write(
        "retry_ready",
        lambda w, t, _: w.tasks.retry_ready(t.id, actor=ACTOR) is not None,
        lambda t, at: t.transition("retry_ready", at=at, actor=ACTOR),
    ),
    Write("carry_over", carry_over_sql, lambda t, at: t.carry_over(1, SOURCE, at=at, actor=ACTOR)),
)
if {w.name.split(",")[0] for w in TASK_WRITES} - {"time_out", "renew_lease"} != {
    t.name for t in TASK_RUN_MACHINE
}:
    raise AssertionError("every TaskRun edge needs a write in TASK_WRITES")


def new_run(writes: Writes, at: datetime, path: tuple[str, ...] = ("start",)) -> WorkflowRun:
    """A run (running, by default) for task rows to belong to, or in any state."""
    return run_in(writes, at, path, None)


def run_in(
    writes: Writes, at: datetime, path: tuple[str, ...], start_at: datetime | None
) -> WorkflowRun:
    """A run made at ``at`` and moved along ``path``, stored."""
    run = run_made(at, path, start_at)
    stored(writes, run.collect_events())
    return run


def run_made(at: datetime, path: tuple[str, ...], start_at: datetime | None) -> WorkflowRun:
    """A run made by the aggregate's own commands, its events not yet collected."""
    run = WorkflowRun._create(
        WorkflowRun.Created,
        id=uuid4(),
        timestamp=at,
        workflow_name="guards",
        definition={"name": "guards", "tasks": [{"key": "a", "type": "guarded"}]},
        inputs={},
        idempotency_key=None,
        rerun_of=None,
        start_at=start_at,
        trace_context=None,
        actor=ACTOR,
    )
    for name in path:
        assert run.transition(name, at=at, actor=ACTOR)
    return run


def stored(writes: Writes, events: Sequence[Any]) -> None:
    """The events applied to the rows (as the rebuild applies them) and logged."""
    for event in events:
        assert writes.rebuild.apply(event)
    writes.recording.append(events)


def run_of(writes: Writes, situation: str, now: datetime) -> WorkflowRun:
    """The run of a task in ``situation``: running, or pending with a start time."""
    start_in = RUN_START_OF_SITUATION.get(situation)
    if start_in is None:
        return new_run(writes, now)
    # A start time is recorded only if later than its run's creation.
    return run_in(writes, now - STALE if start_in < timedelta(0) else now, (), now + start_in)


def task_disagreements(store: Store) -> Iterator[str]:
    """Each (situation, write) whose SQL and Python answers differ, in words."""
    for situation in TASK_SITUATIONS:
        for write in TASK_WRITES:
            with store.write() as writes:
                now = writes.now()
                run = run_of(writes, situation[0], now)
                task = task_in(situation, now, run.id)
                stored(writes, task.collect_events())
                waits = write.name == PROMOTE and start_time.waits(run.start_at, now)
                python = not waits and write.python(task, now)
                sql = write.sql(writes, task, now)
            if sql != python:
                yield f"task {situation[0]!r} / {write.name}: SQL {sql}, Python {python}"


# --- workflow runs ----------------------------------------------------------------------------

#: (name, edges from pending, start time relative to now or None).
RUN_SITUATIONS: tuple[tuple[str, tuple[str, ...], timedelta | None], ...] = (
    ("pending", (), None),
    ("pending, start time to come", (), HOUR),
    ("pending, start time passed", (), -HOUR),
    ("running", ("start",), None),
    ("succeeded", ("start", "succeed"), None),
    ("failed", ("start", "fail"), None),
    ("cancelled before start", ("cancel_before_start",), None),
    ("cancelled", ("start", "cancel"), None),
)


def run_takes(run: WorkflowRun, name: str, at: datetime) -> bool:
    """The Python rule of a run's edge: the aggregate's, and for ``start`` the delayed
    start's (``start_time.waits``), which the advance asks before it starts a run."""
    if name == "start" and start_time.waits(run.start_at, at):
        return False
    return run.transition(name, at=at, actor=ACTOR)


#: A user's cancel: one statement (``run_cancel``) for both of its edges.
USER_CANCEL = "user's cancel"


def run_disagreements(store: Store) -> Iterator[str]:
    for name, path, start_in in RUN_SITUATIONS:
        for write in (*(t.name for t in WORKFLOW_RUN_MACHINE), USER_CANCEL):
            with store.write() as writes:
                now = writes.now()
                # A delayed run is made an hour ago when its time has passed (a start
                # time is recorded only if later than its creation).
                at = now - STALE if start_in is not None and start_in < timedelta(0) else now
                run = run_in(writes, at, path, None if start_in is None else now + start_in)
                if write == USER_CANCEL:
                    python = any(
                        run_takes(run, edge_name, now)
                        for edge_name in ("cancel_before_start", "cancel")
                        if WORKFLOW_RUN_MACHINE.get(edge_name).source == run.state
                    )
                    sql = writes.runs.cancel(run.id, actor=ACTOR) is not None
                else:
                    python = run_takes(run, write, now)
                    sql = writes.runs.move(run.id, run_edge(write), actor=ACTOR) is not None
            if sql != python:
                yield f"run {name!r} / {write}: SQL {sql}, Python {python}"


# --- the tests --------------------------------------------------------------------------------


def test_every_task_run_guard_in_sql_equals_its_python_rule(app: FlowForge) -> None:
    assert list(task_disagreements(app.store)) == []


def test_every_workflow_run_guard_in_sql_equals_its_python_rule(app: FlowForge) -> None:
    assert list(run_disagreements(app.store)) == []


def test_the_situations_put_a_row_in_every_state_of_both_machines() -> None:
    now = datetime.now(UTC)
    task_states = {task_in(s, now, uuid4()).state for s in TASK_SITUATIONS}
    assert task_states == set(TaskRunState)
    run_states = {run_made(now, path, None).state for _, path, _ in RUN_SITUATIONS}
    assert run_states == set(WorkflowRunState)


def test_a_wrong_guard_is_caught(sqlite_app: FlowForge, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: ``task_finish`` without its fencing token lets a stale token
    finish a running task, which the aggregate refuses. (SQLite reads its statements
    from ``statements.load`` at each transaction, so the wrong one is swapped in there.)"""
    load = statements.load
    right = load("sqlite")["task_finish"]
    assert "AND fencing_token = :fencing_token" in right
    wrong = right.replace("AND fencing_token = :fencing_token", "")

    def with_a_wrong_guard(dialect: str) -> Mapping[str, str]:
        loaded = load(dialect)
        return {**loaded, "task_finish": wrong} if dialect == "sqlite" else loaded

    monkeypatch.setattr(statements, "load", with_a_wrong_guard)
    found = list(task_disagreements(sqlite_app.store))
    assert "task 'running' / succeed, token -1: SQL True, Python False" in found
    assert "task 'running' / fail, token +1: SQL True, Python False" in found


def test_a_reaper_without_its_bound_of_lost_workers_is_caught(
    sqlite_app: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check sees which edge the reaper took: ``task_reclaim`` without its bound
    makes a task ready again where the aggregate fails it (WorkerLost)."""
    load = statements.load
    right = load("sqlite")["task_reclaim"]
    bound = "AND worker_losses + 1 < coalesce(max_worker_losses, 3)"
    assert bound in right
    wrong = right.replace(bound, "")

    def without_the_bound(dialect: str) -> Mapping[str, str]:
        loaded = load(dialect)
        return {**loaded, "task_reclaim": wrong} if dialect == "sqlite" else loaded

    monkeypatch.setattr(statements, "load", without_the_bound)
    found = list(task_disagreements(sqlite_app.store))
    assert found == [
        "task 'running, worker lost twice, lease expired' / reap_lease: SQL ready, Python failed"
    ]
