"""Advancement, driven by random work against the DAG rule, on both backends.

Random DAGs (up to five tasks, random dependencies, one or two attempts, retries due at
once) and a random interleaving of: a worker claiming and finishing a ready task (a
success or a failure; alone or through the batched finish, whose leaf successes take a
path of their own), a scheduler's woken pass, a full pass, and a user's cancel of
a run. Finishes advance their running run themselves when they can, a woken pass works
out only the marked tasks, a full pass reads the whole run: this checks that however
they interleave, once the schedulers have nothing left to do (``settle``), every run is
where the DAG rule puts it:

- a run is still pending only while none of its tasks has moved (its first claim starts
  it);
- no pending task of a running run has all its dependencies succeeded (nothing stuck);
- a run is terminal exactly when the rule derives a terminal state from its tasks, and
  then no task of it is left unfinished (a task that failed for good stays failed), and
  that holds as soon as the run ends, before any scheduler pass; a run still running
  that the rule already puts in a terminal state is marked for a scheduler (its last
  change woke it: no lost wake-up);
- each task was promoted at most once, and has one dispatch per move into ready;
- under ``on_failure = "finish_branches"`` (drawn for half the runs), the rule is
  ``rules.derive_finishing_branches``; a run that failed has every task not downstream of
  a failure finished by its own work (none cancelled), and a running run has nothing
  downstream of a failure left pending or ready (cancelled as upstream_failed);
- the mapped tasks' edge (``map_over``, drawn for some tasks: a task mapped over an
  earlier, unmapped one): every success returns a list of 0 to 3 elements; a mapped
  task has exactly one element per element of its upstream's list once (and only once)
  its upstream has succeeded, each created ready with its dispatch, and the rule sees it
  as the model does (``mapping.mapped_state``: its elements' states; a dependant of it
  depends on each element).
"""

from __future__ import annotations

import os
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from flowforge.aggregates import mapping, rules
from flowforge.aggregates.on_failure import OnFailure
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.app.commands import Finish
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge

KEYS = ("a", "b", "c", "d", "e")
MAX_RUNS = 3
#: Examples per run unless FLOWFORGE_STATEFUL_EXAMPLES says otherwise: more than the
#: service's stateful test, because a failure policy's breaks need a failure for good, a
#: branch still alive and its last finish, which few examples reach (docs/testing.md).
EXAMPLES = "100"
#: A settle that has not settled after this many passes is a bug (each pass makes progress).
SETTLE_PASSES = 20
TERMINAL = {WorkflowRunState.SUCCEEDED, WorkflowRunState.FAILED, WorkflowRunState.CANCELLED}
UNFINISHED = {"pending", "ready", "running", "retrying", "failed"}
#: The transitions that make a task ready after its creation: each writes a dispatch.
INTO_READY = ("dependencies_satisfied", "retry_ready", "reap_lease")


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, len(KEYS)))
    keys = KEYS[:count]
    tasks: list[dict[str, Any]] = [
        {
            "key": key,
            "type": "work",
            "depends_on": draw(st.lists(st.sampled_from(keys[:i]), unique=True)) if i else [],
        }
        for i, key in enumerate(keys)
    ]
    for i, task in enumerate(tasks):  # the new edge: a task mapped over an earlier one
        unmapped = [t["key"] for t in tasks[:i] if "map_over" not in t]
        maps: bool = draw(st.booleans())
        if unmapped and maps:
            over = draw(st.sampled_from(unmapped), label=f"{task['key']} maps over")
            task["map_over"], task["depends_on"] = over, [over]
    attempts = draw(st.sampled_from([1, 2]))
    retry = {"max_attempts": attempts, "backoff_seconds": 0.0, "jitter": 0.0}
    on_failure = draw(st.sampled_from(OnFailure))
    return {"name": "dag", "retry": retry, "tasks": tasks, "on_failure": on_failure.value}


class Advancement(RuleBasedStateMachine):
    app: FlowForge

    def __init__(self) -> None:
        super().__init__()
        # Earlier examples' runs stay in the database, settled: only these are judged.
        self.runs: list[UUID] = []
        self.policies: dict[UUID, OnFailure] = {}
        self.maps: dict[UUID, dict[str, str]] = {}

    @precondition(lambda self: len(self.runs) < MAX_RUNS)
    @rule(definition=dags())
    def start_run(self, definition: dict[str, Any]) -> None:
        run_id = self.app.start_workflow_run(definition)
        self.runs.append(run_id)
        self.policies[run_id] = OnFailure(definition["on_failure"])
        self.maps[run_id] = {
            t["key"]: t["map_over"] for t in definition["tasks"] if "map_over" in t
        }

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data(), tasks=st.integers(1, 3))
    def work(self, data: st.DataObject, tasks: int) -> None:
        """A worker (or several) claims and finishes up to ``tasks`` ready tasks in a row:
        enough work per step for failures and branches to play out before a cancel."""
        for _ in range(tasks):
            ready = [t for run in self.runs for t in self.app.task_runs(run) if t.state == "ready"]
            if not ready:
                return
            self._finish(data, data.draw(st.sampled_from(ready), label="task"))

    def _finish(self, data: st.DataObject, task: TaskRunView) -> None:
        claim = self.app.claim_task_run(task.id, "w", 300)
        assert claim is not None
        succeed = data.draw(st.booleans(), label="succeeds")
        error = None if succeed else {"type": "Boom", "message": "no"}
        outcome = "succeed" if succeed else "fail"
        result = [0] * data.draw(st.integers(0, 3), label="list") if succeed else None
        if data.draw(st.booleans(), label="batched"):  # a leaf's success: a path of its own
            finish = Finish(task.id, claim.fencing_token, outcome, result, error)
            assert self.app.finish_task_runs([finish], actor="w") == [True]
        else:
            assert self.app.finish_task_run(
                task.id, claim.fencing_token, outcome, result, error=error
            )

    @rule()
    def woken_pass(self) -> None:
        self.app.advance_woken_runs()

    @rule()
    def full_pass(self) -> None:
        self.app.schedule_once()

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self.app.cancel_workflow_run(data.draw(st.sampled_from(self.runs), label="run"))

    def settle(self) -> None:
        for _ in range(SETTLE_PASSES):
            summary = self.app.schedule_once()
            with self.app.store.read() as reads:
                marks = reads.wakeup_count()
            if not marks and not (summary.promoted or summary.retried or summary.runs_advanced):
                return
        pytest.fail(f"the schedulers did not settle in {SETTLE_PASSES} passes")

    @invariant()
    def every_run_is_where_the_dag_rule_puts_it(self) -> None:
        # An ended run ended its tasks in its own transaction: no pass needed for that.
        for run_id in self.runs:
            state = self.app.get_workflow_run(run_id).run_state
            if state in TERMINAL:
                self._check_ended(self.app.task_runs(run_id))
            elif state is WorkflowRunState.RUNNING:
                self._check_woken_if_ended(run_id)
        self.settle()
        for run_id in self.runs:
            run = self.app.get_workflow_run(run_id)
            tasks = self.app.task_runs(run_id)
            if run.run_state is WorkflowRunState.PENDING:  # started by its first claim
                assert all(t.version == 1 for t in tasks), {t.task_key: t.state for t in tasks}
            self._check_elements(tasks, self.maps[run_id])
            self._check_run(run.run_state, tasks, self.policies[run_id], self.maps[run_id])
            for task in tasks:
                self._check_task(task)

    def _check_woken_if_ended(self, run_id: UUID) -> None:
        """A running run the rule already derives as ended waits for a scheduler: the
        change that ended it marked it (no lost wake-up, whatever the policy)."""
        tasks = self.app.task_runs(run_id)
        effective, depends_on = _model(tasks, self.maps[run_id])
        if rules.derive_run_state(self.policies[run_id], effective, depends_on) in TERMINAL:
            with self.app.store.read() as reads:
                woken = reads.woken_runs(10_000)
            assert run_id in woken, f"ended by the rule, running, not marked: {effective}"

    def _check_elements(self, tasks: list[TaskRunView], maps: dict[str, str]) -> None:
        """One element per element of the upstream's list iff it succeeded: the edge."""
        by_key = {t.task_key: t for t in tasks}
        for key, over in maps.items():
            upstream = by_key.get(over)
            elements = sorted(
                t.task_key
                for t in tasks
                if mapping.mapped_task_of(t.task_key) == key and t.map_index is not None
            )
            if upstream is None or upstream.state != "succeeded":
                assert elements == [], (key, elements)
                continue
            assert elements == sorted(mapping.element_keys(key, upstream.result)), elements
            for element in elements:
                assert by_key[element].map_item == 0
                assert by_key[element].depends_on == [over]

    def _check_run(
        self,
        state: WorkflowRunState,
        tasks: list[TaskRunView],
        policy: OnFailure,
        maps: dict[str, str],
    ) -> None:
        effective, depends_on = _model(tasks, maps)
        snapshot = {t.task_key: t.state for t in tasks}
        blocked = rules.downstream_of_failures(effective, depends_on)
        branches = policy is OnFailure.FINISH_BRANCHES
        if state in TERMINAL:
            self._check_ended(tasks)
            if state is WorkflowRunState.SUCCEEDED:
                assert set(effective.values()) == {TaskRunState.SUCCEEDED}, effective
            if state is WorkflowRunState.FAILED:
                assert TaskRunState.FAILED in effective.values(), snapshot
            if state is WorkflowRunState.FAILED and branches:
                cut_short = [
                    k for k, s in snapshot.items() if s == "cancelled" and k not in blocked
                ]
                assert not cut_short, f"cancelled though not downstream of a failure: {snapshot}"
            return
        assert rules.derive_run_state(policy, effective, depends_on) not in TERMINAL, snapshot
        if branches:
            left = [k for k in blocked if snapshot.get(k) in ("pending", "ready")]
            assert not left, f"downstream of a failure, not cancelled: {left} in {snapshot}"
        succeeded = {k for k, s in effective.items() if s is TaskRunState.SUCCEEDED}
        stuck = [
            t.task_key for t in tasks if t.state == "pending" and succeeded >= set(t.depends_on)
        ]
        assert not stuck, f"eligible but pending: {stuck} in {snapshot}"

    def _check_ended(self, tasks: list[TaskRunView]) -> None:
        """What was left is cancelled; a task that failed for good stays failed."""
        alive = {
            t.task_key: t.state
            for t in tasks
            if t.state in UNFINISHED and not (t.state == "failed" and t.attempt >= t.max_attempts)
        }
        assert alive == {}, {t.task_key: t.state for t in tasks}

    def _check_task(self, task: TaskRunView) -> None:
        history = [entry.transition for entry in self.app.history(task.id)]
        assert history.count("dependencies_satisfied") <= 1, history
        into_ready = sum(t in INTO_READY for t in history)
        initially_ready = not task.depends_on or task.map_index is not None  # an element
        assert len(self.app.dispatches_of(task.id)) == into_ready + initially_ready, history


def _model(
    tasks: list[TaskRunView], maps: dict[str, str]
) -> tuple[dict[str, TaskRunState], dict[str, list[str]]]:
    """The rule's view of a run: each row's effective state and dependencies, and each
    mapped task's, derived from its upstream and its elements (the model's own reading
    of the edge, from the rows alone)."""
    effective = {t.task_key: _effective(t) for t in tasks}
    depends_on = {t.task_key: list(t.depends_on) for t in tasks}
    by_key = {t.task_key: t for t in tasks}
    for key, over in maps.items():
        upstream = by_key.get(over)
        count = (
            len(upstream.result) if upstream is not None and upstream.state == "succeeded" else 0
        )
        listed = upstream.result if upstream is not None and count else []
        elements = mapping.element_keys(key, listed)
        states = {i: effective[k] for i, k in enumerate(elements) if k in effective}
        upstream_state = None if upstream is None else upstream.task_state
        effective[key] = mapping.mapped_state(upstream_state, count, states)
        depends_on[key] = [over, *elements]
    return effective, depends_on


def _effective(task: TaskRunView) -> TaskRunState:
    if task.task_state is TaskRunState.FAILED and task.attempt < task.max_attempts:
        return TaskRunState.RETRYING
    return task.task_state


def test_advancement_keeps_every_run_where_the_dag_rule_puts_it(app: FlowForge) -> None:
    Advancement.app = app
    run_state_machine_as_test(
        Advancement,
        settings=settings(
            max_examples=int(os.environ.get("FLOWFORGE_STATEFUL_EXAMPLES", EXAMPLES)),
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
