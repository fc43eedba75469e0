"""The application service on PostgreSQL, driven by random commands, against a pure model.

The model is the aggregates themselves: a ``TaskRun`` (and ``WorkflowRun``) per row,
given the same command with the same database clock. After a command the service won,
the row's ``updated_at`` is the clock the model uses (the conditional write set it to the
transaction's ``now()``); after one it lost, the model uses the database's ``now()`` read
just before the command, which is no later than the losing write's clock, so every
condition that only gets truer with time (an expired lease, a due retry) is judged
fairly. After every step, every row must equal its model's snapshot, the log must hold
exactly the model's events, the aggregate reconstituted from the log must equal the row,
and the outbox must hold one dispatch per move into ``ready``.

Concurrency limits are in the model too (docs/scheduling/limits.md): runs drawn with a
``max_running_tasks``, an operator's limit set and unset on a type, a claim past a limit
lost with its dispatch held, and each task that leaves ``running`` dispatching again the
oldest held task of its type and of its run; the counter rows must equal the model's
running tasks.

So are lost workers (docs/execution-model.md, "A worker lost too often"): runs drawn with
a small ``max_worker_losses``, so that the reaper's reclaim at the bound (the fail edge,
``WorkerLost``) is driven as often as its ``reap_lease``; the model is the aggregate's
``reclaim``.

A success finished by a worker also advances its run in the same transaction when the
run is running (``advance.advance_after_finish``); the model follows the same rule
(:meth:`ServiceAgainstAggregates.follow_the_finish_advance`).

A run may map its last task over an earlier one (``map_over``, issue 46;
``stateful_mapping``): the upstream's success creates the elements in its transaction,
one ready task run per item of its list; a result that is no list is a failure
(``MapOverError``) instead, nothing created.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.domain import DomainEventProtocol
from hypothesis import HealthCheck, settings
from hypothesis import event as statistic
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from flowforge import errors
from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app.definition_files import load_definition
from flowforge.app.service import FlowForge
from tests.conftest import empty_postgres
from tests.integration import stateful_mapping

pytestmark = pytest.mark.postgres

#: A lease that has expired by the next step, and one that never expires in a test.
TINY, LONG = 0.001, 3600.0
LEASES = st.sampled_from([TINY, LONG])
#: A retry that is due at once, almost at once, or not within the test.
RETRY_DELAYS = st.sampled_from([0.0, TINY, LONG])
WORKERS = st.sampled_from(["w1", "w2", "w3"])
#: The fixed small DAG: each task may depend on the ones before it.
KEYS = ("a", "b", "c")
#: Names that are no edge of the TaskRun machine at all.
NOT_EDGES = ("bogus", "start", "cancel", "", "SUCCEED", "renew_lease", "reap")
#: Edges ``transition_task_run`` refuses, and the error it refuses them with.
REFUSED_EDGES: dict[str, type[Exception]] = {
    "succeed": errors.LeaseRequiredError,
    "fail": errors.LeaseRequiredError,
    "cancel_running": errors.LeaseRequiredError,
    "reap_lease": errors.ReaperOnlyTransitionError,
    "carry_over": errors.RerunOnlyTransitionError,
}
MOVES = (
    "dependencies_satisfied",
    "cancel_pending",
    "cancel_ready",
    "cancel_failed",
    "cancel_retrying",
)
RESULTS = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.text("xyz \u00e9\u2603", max_size=4),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=3),
    st.fixed_dictionaries({"rows": st.integers(0, 9), "path": st.text("ab/", max_size=3)}),
)
ERRORS = st.one_of(
    st.none(),  # refused by fail: an error must carry type and message
    st.fixed_dictionaries({"type": st.just("ValueError"), "message": st.text("ab ", max_size=4)}),
    st.fixed_dictionaries(
        {"type": st.just("KeyError"), "message": st.just("k"), "traceback": st.just("tb")}
    ),
)
ACTORS = st.sampled_from([None, "w1", "ops"])
OUTCOMES = st.sampled_from(["succeed", "fail", "cancel_running"])
#: Mostly the token of the current claim; sometimes an older or a never-issued one.
TOKENS = st.sampled_from(["current", "current", "stale", "future"])
#: The token a worker holds: mostly current, sometimes one the reaper made stale.
HELD_TOKENS = st.sampled_from(["current", "current", "current", "stale"])
OTHERS = (
    "run_transition",
    "transition",
    "finish",
    "refused_run_transition",
    "arguments",
    "missing_row",
)

#: 25 programs keep the suite fast; FLOWFORGE_STATEFUL_EXAMPLES=500 searches deeper.
SETTINGS = settings(
    max_examples=int(os.environ.get("FLOWFORGE_STATEFUL_EXAMPLES", "25")),
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def definition(
    keys: list[str], deps: dict[str, list[str]], max_attempts: int, over: str | None = None
) -> dict[str, Any]:
    """The run's workflow; ``over``: its last task is mapped over that one."""
    tasks: list[dict[str, Any]] = [
        {"key": k, "type": f"t_{k}", "depends_on": deps[k]} for k in keys
    ]
    if over is not None:
        tasks[-1]["map_over"] = over
    return {
        "name": "wf",
        "tasks": tasks,
        "retry": {"max_attempts": max_attempts, "backoff_seconds": 0.0, "jitter": 0.0},
    }


def normalised_error(error: dict[str, str]) -> dict[str, str]:
    """What ``finish_task_run`` documents it stores for ``error``."""
    return {"traceback": "", **error}


class TaskModel:
    """One task run's model aggregate, its expected events and its expected dispatches.
    ``freed``: called with the task's id when it leaves running (its limits' slots)."""

    def __init__(
        self,
        aggregate: TaskRun,
        created: DomainEventProtocol[UUID],
        freed: Callable[[UUID], None],
    ) -> None:
        self.aggregate = aggregate
        self.events: list[DomainEventProtocol[UUID]] = [created]
        ready = aggregate.state is TaskRunState.READY
        #: The fencing token of each outbox row, in order.
        self.dispatches: list[int] = [0] if ready else []
        self._freed = freed

    def record(self) -> None:
        """Move the aggregate's new events to the expected log, and the expected outbox."""
        for event in self.aggregate.collect_events():
            assert isinstance(event, TaskRun.Transitioned)
            if event.state == TaskRunState.READY and event.source != TaskRunState.READY:
                self.dispatches.append(event.fencing_token)
            self.events.append(event)
            if event.source == TaskRunState.RUNNING != event.state:  # not a heartbeat
                self._freed(event.originator_id)


@dataclass
class HoldModel:
    """A refused claim's held dispatch: which limit, in what order, and whether a freed
    slot (or a raised limit) has dispatched it again since."""

    held_by: str
    order: int
    released: bool = False


class ServiceAgainstAggregates(RuleBasedStateMachine):
    """Each rule runs one command on the service and the same command on the model."""

    #: Set by the test before the machine runs (one app for every example).
    app: ClassVar[FlowForge]
    url: ClassVar[str]
    clock: ClassVar[psycopg.Connection[Any]]

    def __init__(self) -> None:
        super().__init__()
        empty_postgres(self.url)
        self.task_models: dict[UUID, TaskModel] = {}
        self.run_models: dict[UUID, tuple[WorkflowRun, list[DomainEventProtocol[UUID]]]] = {}
        #: Concurrency limits: the operator's per type with a counter (None: unset),
        #: each run's max_running_tasks, and the held dispatches.
        self.type_limits: dict[str, int | None] = {}
        self.run_limits: dict[UUID, int | None] = {}
        self.holds: dict[UUID, HoldModel] = {}
        self.holds_made = 0
        #: Each run's definition, and its task mapped over each upstream (at most one).
        self.specs: dict[UUID, dict[str, Any]] = {}
        self.maps: dict[UUID, dict[str, str]] = {}

    # --- helpers ----------------------------------------------------------------------

    def db_now(self) -> datetime:
        row = self.clock.execute("SELECT now()").fetchone()
        assert row is not None
        value: datetime = row[0]
        return value

    def model(self, task_id: UUID) -> TaskRun:
        return self.task_models[task_id].aggregate

    def judge(
        self, task_id: UUID, won: bool, before: datetime, command: Callable[..., bool]
    ) -> None:
        """Give the model the same command at the clock the service's write saw."""
        at = self.app.get_task_run(task_id).updated_at if won else before
        expected = command(at)
        assert won == expected, f"service {'won' if won else 'lost'}, the model did not"
        self.task_models[task_id].record()

    def pick(
        self, data: st.DataObject, *states: TaskRunState, due: datetime | None = None
    ) -> UUID:
        """A task run: most often one in ``states`` (where the command can win), and
        with ``due``, most often one whose lease expired or whose retry is due by then;
        sometimes any task run (where it must lose)."""
        everyone = list(self.task_models)  # creation order: replays draw the same task
        likely = [t for t in everyone if self.model(t).state in states]
        if due is not None and data.draw(st.integers(0, 2), label="due") > 0:
            likely = [t for t in likely if self.is_due(t, due)]
        if likely and data.draw(st.integers(0, 4), label="likely") > 0:
            return data.draw(st.sampled_from(likely), label="task")
        return data.draw(st.sampled_from(everyone), label="task")

    def is_due(self, task: UUID, now: datetime) -> bool:
        model = self.model(task)
        moment = model.lease_expires_at or model.retry_due_at
        return moment is None or moment <= now

    def result_for(self, data: st.DataObject, task: UUID) -> Any:
        """A success's result: for a task others are mapped over, most often a list."""
        model = self.model(task)
        mapped = model.task_key in self.maps[model.workflow_run_id]
        spec = self.specs[model.workflow_run_id]
        lists = stateful_mapping.lists_for(spec)
        return data.draw(lists if mapped else RESULTS, label="result")

    def outcomes_for(self, task: UUID) -> list[str]:
        """A worker's outcomes, mostly failures; a task others are mapped over mostly
        succeeds (so that a short program expands its list)."""
        model = self.model(task)
        if model.task_key in self.maps[model.workflow_run_id]:
            return ["succeed", "succeed", "fail"]
        return ["fail", "succeed", "fail", "cancel_running"]

    def token(self, task: UUID, which: str) -> int:
        current = self.model(task).fencing_token
        return {"current": current, "stale": current - 1, "future": current + 1}[which]

    # --- commands -------------------------------------------------------------------

    @initialize(data=st.data())
    def first_run(self, data: st.DataObject) -> None:
        self.start_run(data)

    @precondition(lambda self: len(self.run_models) < 2)
    @rule(data=st.data())
    def start_run(self, data: st.DataObject) -> None:
        count = data.draw(st.integers(1, 3), label="tasks")
        keys = list(KEYS[:count])
        deps = {
            k: data.draw(st.lists(st.sampled_from(keys[:i]), unique=True), label=f"deps_{k}")
            if i
            else []
            for i, k in enumerate(keys)
        }
        over = stateful_mapping.draw_map(data, keys, deps)
        max_attempts = data.draw(st.sampled_from([1, 2, 3]), label="max_attempts")
        spec = definition(keys, deps, max_attempts, over)
        stateful_mapping.draw_map_key(data, spec)
        run_limit = data.draw(st.sampled_from([None, None, 1, 2]), label="max_running_tasks")
        if run_limit is not None:
            spec["max_running_tasks"] = run_limit
        # A worker lost too often (docs/execution-model.md): a small bound makes the
        # reaper's fail edge as likely as its reap_lease; None: the default (3).
        losses = data.draw(st.sampled_from([None, 1, 2]), label="max_worker_losses")
        if losses is not None:
            spec["max_worker_losses"] = losses
        run_id = self.app.start_workflow_run(spec, {"n": 1}, actor="user")
        self.run_limits[run_id] = run_limit
        self.specs[run_id] = spec
        # A mapped task has no task run of its own: its elements come with its list.
        self.maps[run_id] = {} if over is None else {over: keys.pop()}

        run_row = self.app.get_workflow_run(run_id)
        run_created = workflow_run.created_event(
            run_id,
            at=run_row.created_at,
            workflow_name="wf",
            definition=load_definition(spec).to_dict(),
            inputs={"n": 1},
            idempotency_key=None,
            actor="user",
        )
        run_model = run_created.mutate(None)
        assert isinstance(run_model, WorkflowRun)
        self.run_models[run_id] = (run_model, [run_created])

        rows = {row.task_key: row for row in self.app.task_runs(run_id)}
        assert sorted(rows) == keys
        for key in keys:
            row = rows[key]
            created = task_run.created_event(
                row.id,
                at=row.created_at,
                workflow_run_id=run_id,
                task_key=key,
                task_type=f"t_{key}",
                depends_on=deps[key],
                max_attempts=max_attempts,
                lease_seconds=load_definition(spec).lease_seconds_for(key),
                max_worker_losses=load_definition(spec).max_worker_losses_for(key),
                state=TaskRunState.PENDING if deps[key] else TaskRunState.READY,
                actor="user",
            )
            aggregate = created.mutate(None)
            assert isinstance(aggregate, TaskRun)
            self.task_models[row.id] = TaskModel(aggregate, created, self.freed)

    # One method per command, shared by its own rule and by ``step_forward``.

    # --- concurrency limits -------------------------------------------------------

    def running_of(self, *, task_type: str | None = None, run: UUID | None = None) -> int:
        return sum(
            m.aggregate.state is TaskRunState.RUNNING
            and (task_type is None or m.aggregate.task_type == task_type)
            and (run is None or m.aggregate.workflow_run_id == run)
            for m in self.task_models.values()
        )

    def refusal(self, task: UUID) -> str | None:
        """Which limit refuses a claim of the ready ``task`` now (the run's first)."""
        model = self.model(task)
        run_limit = self.run_limits[model.workflow_run_id]
        if run_limit is not None and self.running_of(run=model.workflow_run_id) >= run_limit:
            return "run"
        type_limit = self.type_limits.get(model.task_type)
        if type_limit is not None and self.running_of(task_type=model.task_type) >= type_limit:
            return "type"
        return None

    def release(self, held_by: str, matches: Callable[[TaskRun], bool], limit: int) -> None:
        """Dispatch again the oldest ``limit`` held tasks still ready that ``matches``."""
        waiting = sorted(
            (hold.order, task)
            for task, hold in self.holds.items()
            if hold.held_by == held_by
            and not hold.released
            and self.model(task).state is TaskRunState.READY
            and matches(self.model(task))
        )
        for _, task in waiting[:limit]:
            self.holds[task].released = True
            self.task_models[task].dispatches.append(self.model(task).fencing_token)

    def freed(self, task: UUID) -> None:
        """A task left running: the oldest held task of its type and of its run."""
        model = self.model(task)
        if model.task_type in self.type_limits:
            self.release("type", lambda t: t.task_type == model.task_type, 1)
        if self.run_limits[model.workflow_run_id] is not None:
            self.release("run", lambda t: t.workflow_run_id == model.workflow_run_id, 1)

    @rule(
        task_type=st.sampled_from(["t_a", "t_b"]),
        limit=st.sampled_from([None, 1, 1, 2]),
    )
    def operator_limit(self, task_type: str, limit: int | None) -> None:
        """An operator sets (or removes) a type's limit; the room it makes dispatches
        held tasks again."""
        if limit is None:
            changed = self.app.unset_task_type_limit(task_type)
            assert changed == (self.type_limits.get(task_type) is not None)
            if changed:
                self.type_limits[task_type] = None
                self.release("type", lambda t: t.task_type == task_type, 2**31)
                if self.counter_idle(task_type):
                    del self.type_limits[task_type]  # the removal deleted its counter row
            return
        assert self.app.set_task_type_limit(task_type, limit)
        self.type_limits[task_type] = limit
        room = limit - self.running_of(task_type=task_type)
        self.release("type", lambda t: t.task_type == task_type, max(room, 0))

    def counter_idle(self, task_type: str) -> bool:
        """Whether a type's counter counts nothing any more: none of its tasks running,
        none held (a held task's row goes with its claim or its cancel). No task here
        has a ``max_running`` of its own."""
        held = any(
            self.model(task).task_type == task_type and self.model(task).state == "ready"
            for task in self.holds
        )
        return self.running_of(task_type=task_type) == 0 and not held

    def do_claim(self, task: UUID, worker: str, lease: float, by_name: bool) -> None:
        refused = self.refusal(task) if self.model(task).state is TaskRunState.READY else None
        if refused is not None:
            # A claim past a limit loses: nothing changes but its dispatch is held.
            assert self.app.claim_task_run(task, worker, lease) is None
            self.holds[task] = HoldModel(refused, self.holds_made)
            self.holds_made += 1
            return
        before = self.db_now()
        claim = None
        if by_name:
            won = self.app.transition_task_run(
                task, "claim", worker_id=worker, lease_seconds=lease
            )
        else:
            claim = self.app.claim_task_run(task, worker, lease)
            won = claim is not None
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).claim(worker, timedelta(seconds=lease), at=at),
        )
        if won:
            self.holds.pop(task, None)
            self.follow_the_claim(task, worker)
        if claim is not None:
            model = self.model(task)
            assert claim.task_run_id == task
            assert claim.fencing_token == model.fencing_token
            assert claim.attempt == model.attempt
            assert claim.lease_expires_at == model.lease_expires_at

    def follow_the_claim(self, task: UUID, worker: str) -> None:
        """A won claim starts its run if the run is pending, in the claim's transaction
        (nothing else holds the run row here), by the worker."""
        run_id = self.model(task).workflow_run_id
        run, run_events = self.run_models[run_id]
        if run.state is WorkflowRunState.PENDING:
            at = self.app.get_workflow_run(run_id).updated_at
            assert run.transition("start", at=at, actor=worker)
            run_events.extend(run.collect_events())

    def do_finish(
        self,
        task: UUID,
        outcome: str,
        token: str,
        result: Any,
        error: dict[str, str] | None,
        actor: str | None,
    ) -> None:
        fencing_token = self.token(task, token)
        if outcome == "fail" and error is None:
            with pytest.raises(ValueError, match="type"):
                self.app.finish_task_run(task, fencing_token, outcome, result, error, actor=actor)
            return
        before = self.db_now()
        won = self.app.finish_task_run(task, fencing_token, outcome, result, error, actor=actor)
        run_id, key = self.model(task).workflow_run_id, self.model(task).task_key
        mapped = self.maps[run_id].get(key) if outcome == "succeed" else None
        # A result a mapped task cannot expand makes the success a failure (MapOverError).
        stored = normalised_error(error) if error is not None else None
        if mapped is not None and (
            map_error := stateful_mapping.refused(result, key, mapped, self.specs[run_id])
        ):
            outcome, result, stored = "fail", None, map_error
            statistic("a result that cannot be expanded refused")
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).finish(
                outcome, fencing_token, at=at, actor=actor or "worker", result=result, error=stored
            ),
        )
        if won and outcome == "succeed":
            if mapped is not None:
                self.expand(run_id, mapped, result, actor or "worker")
            at = self.app.get_task_run(task).updated_at
            self.follow_the_finish_advance(task, at, actor or "worker")

    def expand(self, run_id: UUID, mapped: str, result: list[Any], actor: str) -> None:
        """The elements the upstream's success created, in the model (each ready)."""
        spec = self.specs[run_id]
        keyed = "keyed " if "map_key" in spec["tasks"][-1] else ""
        statistic(
            f"expanded into {min(len(result), 2)}{'+' if len(result) > 1 else ''} {keyed}elements"
        )
        for task_id, created in stateful_mapping.elements(
            self.app, run_id, spec, mapped, result, actor
        ):
            aggregate = created.mutate(None)
            assert isinstance(aggregate, TaskRun)
            self.task_models[task_id] = TaskModel(aggregate, created, self.freed)

    def follow_the_finish_advance(self, task: UUID, at: datetime, actor: str) -> None:
        """The advance a success takes in its own transaction when its run is pending
        or running: a pending run starts, the finished task's dependents and their
        dependencies step (promote what became eligible, retry what failed with
        attempts left, make due retries ready), then the run succeeds if every task
        has. All at the finish's clock, by its actor."""
        run_id = self.model(task).workflow_run_id
        run, run_events = self.run_models[run_id]
        if run.state is WorkflowRunState.PENDING:
            assert run.transition("start", at=at, actor=actor)
            run_events.extend(run.collect_events())
        if run.state is not WorkflowRunState.RUNNING:
            return
        tasks = {
            model.aggregate.task_key: (task_id, model.aggregate)
            for task_id, model in self.task_models.items()
            if model.aggregate.workflow_run_id == run_id
        }
        changed = self.model(task).task_key
        dependents = {key for key, (_, t) in tasks.items() if changed in t.depends_on}
        needed = {
            changed,
            *dependents,
            *(d for key in dependents for d in tasks[key][1].depends_on),
        }
        succeeded = {key for key in needed if tasks[key][1].state is TaskRunState.SUCCEEDED}
        for task_id, model in sorted(tasks[key] for key in needed):
            if model.state is TaskRunState.PENDING and succeeded.issuperset(model.depends_on):
                assert model.transition("dependencies_satisfied", at=at, actor=actor)
            elif model.state is TaskRunState.FAILED and model.attempt < model.max_attempts:
                # The definitions here retry at once (no backoff, no jitter).
                assert model.schedule_retry(delay=timedelta(0), at=at, actor=actor)
            elif model.state is TaskRunState.RETRYING and self.is_due(task_id, at):
                assert model.transition("retry_ready", at=at, actor=actor)
            self.task_models[task_id].record()
        if all(t.state is TaskRunState.SUCCEEDED for _, t in tasks.values()):
            assert run.transition("succeed", at=at, actor=actor)
            run_events.extend(run.collect_events())

    def do_renew_lease(self, task: UUID, token: str, lease: float, actor: str | None) -> None:
        fencing_token = self.token(task, token)
        before = self.db_now()
        won = self.app.renew_lease(task, fencing_token, lease, actor=actor)
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).renew_lease(
                fencing_token, timedelta(seconds=lease), at=at, actor=actor or "worker"
            ),
        )

    def do_reclaim(self, task: UUID, before: datetime) -> None:
        won = self.app.reclaim_task_run(task)
        self.judge(task, won, before, lambda at: self.model(task).reclaim(at=at))

    def do_schedule_retry(self, task: UUID, delay: float, actor: str) -> None:
        before = self.db_now()
        won = self.app.schedule_retry(task, delay, actor=actor)
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).schedule_retry(
                delay=timedelta(seconds=delay), at=at, actor=actor
            ),
        )

    def do_retry_ready(self, task: UUID, before: datetime, by_name: bool) -> None:
        if by_name:
            won = self.app.transition_task_run(task, "retry_ready", actor="scheduler")
        else:
            won = self.app.retry_ready(task)
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).transition("retry_ready", at=at, actor="scheduler"),
        )

    def do_transition(self, task: UUID, name: str, actor: str | None) -> None:
        before = self.db_now()
        won = self.app.transition_task_run(task, name, actor=actor or "user")
        self.judge(
            task,
            won,
            before,
            lambda at: self.model(task).transition(name, at=at, actor=actor or "user"),
        )

    # The rules. Commands are grouped by who sends them (a worker, the reaper, the
    # scheduler) so that each group is drawn as often as ``step_forward``.

    @rule(data=st.data(), kind=st.sampled_from(["claim", "finish", "renew"]))
    def worker(self, data: st.DataObject, kind: str) -> None:
        """A worker's command on any task run (most often one it can win on), with the
        current fencing token, an older one, or one never issued."""
        if kind == "claim":
            task = self.pick(data, TaskRunState.READY)
            self.do_claim(task, data.draw(WORKERS), data.draw(LEASES), data.draw(st.booleans()))
        elif kind == "finish":
            task = self.pick(data, TaskRunState.RUNNING)
            self.do_finish(
                task,
                data.draw(OUTCOMES, label="outcome"),
                data.draw(TOKENS, label="token"),
                self.result_for(data, task),
                data.draw(ERRORS, label="error"),
                data.draw(ACTORS, label="actor"),
            )
        else:
            task = self.pick(data, TaskRunState.RUNNING)
            self.do_renew_lease(task, data.draw(TOKENS), data.draw(LEASES), data.draw(ACTORS))

    @rule(data=st.data(), kind=st.sampled_from(["reclaim", "reap"]))
    def reaper(self, data: st.DataObject, kind: str) -> None:
        """The reaper: one task run, or every expired lease at once."""
        before = self.db_now()
        if kind == "reclaim":
            self.do_reclaim(self.pick(data, TaskRunState.RUNNING, due=before), before)
            return
        reaped = self.app.reap_expired_leases()
        assert len(reaped) == len(set(reaped))
        assert set(reaped) <= set(self.task_models)
        for task in self.task_models:
            self.judge(
                task, task in reaped, before, lambda at, t=task: self.model(t).reclaim(at=at)
            )

    @rule(
        data=st.data(),
        kind=st.sampled_from(["schedule_retry", "retry_ready", "transition"]),
        actor=ACTORS,
    )
    def scheduler(self, data: st.DataObject, kind: str, actor: str | None) -> None:
        """Retries and the lease-free edges, by their own methods or by name."""
        if kind == "schedule_retry":
            task = self.pick(data, TaskRunState.FAILED)
            self.do_schedule_retry(task, data.draw(RETRY_DELAYS), actor or "scheduler")
        elif kind == "retry_ready":
            before = self.db_now()
            task = self.pick(data, TaskRunState.RETRYING, due=before)
            self.do_retry_ready(task, before, by_name=data.draw(st.booleans()))
        else:
            name = data.draw(st.sampled_from([*MOVES, "schedule_retry"]), label="name")
            source = TASK_RUN_MACHINE.get(name).source
            assert isinstance(source, TaskRunState)
            self.do_transition(self.pick(data, source), name, actor)

    @rule(data=st.data())
    def step_forward(self, data: st.DataObject) -> None:
        """One command of a worker's or the scheduler's life for a live task run (the
        edge its state calls for, with the fencing token a worker might hold), so that
        a short program reaches stale tokens, expired leases and retries."""
        alive = [
            t for t in self.task_models if not TASK_RUN_MACHINE.is_terminal(self.model(t).state)
        ]
        if not alive:
            return
        task = data.draw(st.sampled_from(alive), label="task")
        state = self.model(task).state
        before = self.db_now()
        if state is TaskRunState.PENDING:
            self.do_transition(task, "dependencies_satisfied", "scheduler")
        elif state is TaskRunState.READY:
            self.do_claim(task, data.draw(WORKERS), data.draw(LEASES), by_name=False)
        elif state is TaskRunState.RUNNING:
            action = data.draw(st.sampled_from(["finish", "finish", "renew", "reclaim"]))
            if action == "reclaim" or (action == "renew" and self.is_due(task, before)):
                self.do_reclaim(task, before)
            elif action == "renew":
                self.do_renew_lease(task, data.draw(HELD_TOKENS), data.draw(LEASES), None)
            else:
                outcome = data.draw(st.sampled_from(self.outcomes_for(task)))
                error = {"type": "RuntimeError", "message": "boom"}
                result = self.result_for(data, task)
                self.do_finish(task, outcome, data.draw(HELD_TOKENS), result, error, None)
        elif state is TaskRunState.FAILED:
            self.do_schedule_retry(task, data.draw(RETRY_DELAYS), "scheduler")
        else:
            self.do_retry_ready(task, before, by_name=False)

    def do_transition_workflow_run(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(list(self.run_models)), label="run")
        name = data.draw(st.sampled_from([t.name for t in WORKFLOW_RUN_MACHINE]), label="name")
        model, events = self.run_models[run]
        before = self.db_now()
        won = self.app.transition_workflow_run(run, name, actor="ops")
        at = self.app.get_workflow_run(run).updated_at if won else before
        assert won == model.transition(name, at=at, actor="ops")
        events.extend(model.collect_events())

    @rule(data=st.data(), kind=st.sampled_from(OTHERS))
    def other(self, data: st.DataObject, kind: str) -> None:
        """A run's own edges; what must raise before any SQL (the invariants then check
        that the rows and the log did not change); what on a missing row is a lost race."""
        if kind == "run_transition":
            self.do_transition_workflow_run(data)
            return
        task = self.pick(data)
        model = self.model(task)
        token = model.fencing_token
        if kind == "transition":
            name = data.draw(st.sampled_from([*NOT_EDGES, "claim", *REFUSED_EDGES]), label="name")
            error = REFUSED_EDGES.get(name, errors.IllegalTransitionError)
            with pytest.raises(error):
                self.app.transition_task_run(task, name)
            with pytest.raises(error):
                model.transition(name, at=self.db_now(), actor="user")
            with pytest.raises(error):  # the same whether or not the row exists
                self.app.transition_task_run(uuid4(), name)
        elif kind == "finish":
            outcome = data.draw(
                st.sampled_from([*NOT_EDGES, "claim", "reap_lease", *MOVES, "retry_ready"]),
                label="outcome",
            )
            with pytest.raises(errors.IllegalTransitionError):
                self.app.finish_task_run(task, token, outcome, error={"type": "E", "message": "m"})
            with pytest.raises(errors.IllegalTransitionError):
                model.finish(outcome, token, at=self.db_now(), actor="worker")
        elif kind == "refused_run_transition":
            run = data.draw(st.sampled_from(list(self.run_models)), label="run")
            name = data.draw(st.sampled_from(["bogus", "claim", "succeeded", ""]), label="name")
            with pytest.raises(errors.IllegalTransitionError):
                self.app.transition_workflow_run(run, name)
            with pytest.raises(errors.IllegalTransitionError):
                self.run_models[run][0].transition(name, at=self.db_now(), actor="ops")
        elif kind == "arguments":
            bad = data.draw(st.sampled_from([0.0, -1.0, float("nan")]), label="bad")
            with pytest.raises(ValueError, match="lease_seconds"):
                self.app.claim_task_run(task, "w1", bad)
            with pytest.raises(ValueError, match="lease_seconds"):
                self.app.renew_lease(task, token, bad)
            if not bad >= 0:
                with pytest.raises(ValueError, match="delay_seconds"):
                    self.app.schedule_retry(task, bad)
        else:
            self.missing_task_run_loses(data)

    def missing_task_run_loses(self, data: st.DataObject) -> None:
        """A legal command on a task run that does not exist is a lost race, not an error."""
        missing = uuid4()
        commands: dict[str, Callable[[], object]] = {
            "claim": lambda: self.app.claim_task_run(missing, "w1", LONG),
            "reclaim": lambda: self.app.reclaim_task_run(missing),
            "renew": lambda: self.app.renew_lease(missing, 1, LONG),
            "finish": lambda: self.app.finish_task_run(missing, 1, "succeed"),
            "retry_ready": lambda: self.app.retry_ready(missing),
            "schedule_retry": lambda: self.app.schedule_retry(missing),
            **{name: self._move(missing, name) for name in MOVES},
            "run": lambda: self.app.transition_workflow_run(missing, "start"),
        }
        name = data.draw(st.sampled_from(list(commands)), label="command")
        assert commands[name]() in (False, None)

    # --- invariants -----------------------------------------------------------------

    @invariant()
    def rows_log_and_outbox_agree_with_the_model(self) -> None:
        for task, expected in self.task_models.items():
            row = dataclasses.asdict(self.app.get_task_run(task))
            snapshot = expected.aggregate.snapshot()
            assert {k: row[k] for k in snapshot} == snapshot
            assert (row["state"] == "running") == (row["lease_expires_at"] is not None)
            assert self.app.task_run_aggregate(task).snapshot() == snapshot
            assert list(self.log_of(task)) == expected.events
            outbox = [d.fencing_token for d in self.app.dispatches_of(task)]
            assert outbox == expected.dispatches
        counted = {view.task_type: view.running for view in self.app.task_type_limits()}
        assert counted == {t: self.running_of(task_type=t) for t in self.type_limits}
        for run, (model, events) in self.run_models.items():
            with self.app.store.read() as reads:
                counter = reads.run_limit(run)
            if self.run_limits[run] is None:
                assert counter is None
            else:
                assert counter is not None
                assert counter["running"] == self.running_of(run=run)
            row = dataclasses.asdict(self.app.get_workflow_run(run))
            snapshot = model.snapshot()
            assert {k: row[k] for k in snapshot} == snapshot
            assert self.app.workflow_run_aggregate(run).snapshot() == snapshot
            assert list(self.log_of(run)) == events

    def _move(self, task: UUID, name: str) -> Callable[[], object]:
        return lambda: self.app.transition_task_run(task, name)

    def log_of(self, aggregate_id: UUID) -> Iterator[DomainEventProtocol[UUID]]:
        events = self.app.events
        for stored in events.recorder.select_events(aggregate_id):
            yield events.mapper.to_domain_event(stored)


def test_the_service_on_postgresql_agrees_with_the_pure_aggregates_command_by_command(
    postgres_url: str,
) -> None:
    with FlowForge(postgres_url) as app, psycopg.connect(postgres_url, autocommit=True) as clock:
        ServiceAgainstAggregates.app = app
        ServiceAgainstAggregates.url = postgres_url
        ServiceAgainstAggregates.clock = clock
        run_state_machine_as_test(ServiceAgainstAggregates, settings=SETTINGS)
