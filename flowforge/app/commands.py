"""The commands that change a run or a task run.

Every command follows the one rule (docs/architecture.md): legality first, decided by the
pure core before any I/O; then one transaction holding the conditional write on the
current-state row, the event at the row's new version, and the outbox row when a task
became ready. A lost race or a stale fencing token returns ``False`` (or ``None``) and
appends nothing; it never raises.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from flowforge import errors, observe
from flowforge.aggregates import idempotency, json_values, rerun, start_time
from flowforge.aggregates.definition import MAX_LEASE_SECONDS, MAX_SECONDS, WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE, Transition
from flowforge.aggregates.rerun import RerunPlan
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import (
    ACTOR_REAPER,
    ACTOR_SCHEDULER,
    ACTOR_USER,
    Provenance,
    finish_rule,
    timed_out_error,
    transition_rule,
)
from flowforge.app import advance
from flowforge.app.core import ServiceCore
from flowforge.app.definition_files import load_definition
from flowforge.app.results import AdvanceResult, Claim, StartedRun
from flowforge.limits import batch_of_ids
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import LeafSuccess, Writes

log = logging.getLogger(__name__)


class Commands:
    """The commands that change a run or a task run (the module says how)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    # --- workflow runs -------------------------------------------------------------------

    def start_workflow_run(
        self,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str = ACTOR_USER,
        start_at: start_time.StartAt = None,
    ) -> UUID:
        """Create a run and its task runs in one transaction; the run's id.

        With an ``idempotency_key`` that a run already has, returns that run's id and
        creates nothing.

        ``start_at``: an aware ``datetime``, or a ``timedelta`` counted from the
        database's now: the run stays pending, none of its tasks ready, until then by
        the database's clock; a time not in the future starts it at once
        (``flowforge.aggregates.start_time``). ``ValueError`` for a naive time.
        """
        return self.submit_workflow_run(
            definition, inputs, idempotency_key=idempotency_key, actor=actor, start_at=start_at
        ).run_id

    def submit_workflow_run(
        self,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str = ACTOR_USER,
        start_at: start_time.StartAt = None,
    ) -> StartedRun:
        """Like :meth:`start_workflow_run`, also saying whether the run is new.

        ``IdempotencyKeyConflictError`` if the key's run was submitted with another
        workflow or other inputs, naming what differs."""
        checked = load_definition(definition)
        run_inputs = json_values.checked_json(dict(inputs or {}), "inputs")
        start = start_time.checked(start_at)
        with self._core.writes() as writes:
            run_id, created = create_run(
                writes,
                checked,
                run_inputs,
                idempotency_key=text(idempotency_key, "idempotency_key"),
                actor=text(actor, "actor"),
                start_at=start,
            )
        if not created:
            self._check_same_submission(run_id, checked, run_inputs, idempotency_key)
        log.info(
            "workflow run submitted",
            extra={"workflow_run_id": str(run_id), "run_created": created},
        )
        return StartedRun(run_id, created)

    def _check_same_submission(
        self,
        run_id: UUID,
        definition: WorkflowDefinition,
        inputs: dict[str, Any],
        idempotency_key: str | None,
    ) -> None:
        with self._core.reads() as reads:
            stored = reads.workflow_run(run_id)
        assert stored is not None  # a run is never deleted
        differs = idempotency.conflict(
            stored.definition, stored.inputs, definition.to_dict(), inputs
        )
        if differs is not None:
            raise errors.IdempotencyKeyConflictError(
                f"idempotency key {idempotency_key!r} belongs to run {run_id}, submitted "
                f"with something else: {differs}. Use a new key for a new submission "
                f"(nothing was created)"
            )

    def rerun_workflow_run(
        self,
        run_id: UUID,
        *,
        from_tasks: Collection[str] = (),
        idempotency_key: str | None = None,
        actor: str = ACTOR_USER,
    ) -> StartedRun:
        """Start a new run of a finished run's definition and inputs, linked to it
        (its ``rerun_of``). Each task that succeeded in the old run and is neither in
        ``from_tasks`` nor downstream of one is not run again: its result is carried
        over (the ``carry_over`` edge, recording the run, task run and attempt that
        produced it); every other task runs again. Without ``from_tasks``, every task
        that did not succeed runs again (``flowforge.aggregates.rerun``).

        The whole new run is ONE transaction, the one :meth:`submit_workflow_run`
        writes, and an ``idempotency_key`` works as it does there.
        ``UnknownRunError`` for no such run, ``UnknownTaskKeyError`` for a key of
        ``from_tasks`` the workflow lacks, ``RunNotFinishedError`` for a run that has
        not ended, ``NothingToRerunError`` when no task would run again."""
        if isinstance(from_tasks, str):
            raise TypeError(f"from_tasks is a collection of task keys: ({from_tasks!r},)")
        keys = [text(key, "from_tasks") for key in from_tasks]
        idempotency_key = text(idempotency_key, "idempotency_key")
        actor = text(actor, "actor")
        with self._core.writes() as writes:
            # A finished run never changes again, nor do its tasks (a run ends whole):
            # reading it in this transaction reads what the rerun is made from.
            old = advance.load_run(writes, run_id)
            definition = self._core.definitions.of(old)
            succeeded = {
                task.task_key: rerun.CarriedResult(task.result, source_of(task))
                for task in writes.task_runs_of(old.id)
                if task.task_state is TaskRunState.SUCCEEDED
            }
            plan = rerun.plan(old.id, old.run_state, definition, succeeded, keys)
            new_run_id, created = create_run(
                writes,
                definition,
                old.inputs,
                idempotency_key=idempotency_key,
                actor=actor,
                rerun=plan,
            )
        log.info(
            "workflow run rerun",
            extra={
                "workflow_run_id": str(new_run_id),
                "rerun_of": str(old.id),
                "carried_over": len(plan.carried),
                "run_created": created,
            },
        )
        return StartedRun(new_run_id, created)

    def start_workflow_runs(
        self,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Sequence[Mapping[str, Any] | None],
        *,
        actor: str = ACTOR_USER,
        start_at: start_time.StartAt = None,
    ) -> list[UUID]:
        """Create one run of ``definition`` per entry of ``inputs``, all in ONE
        transaction (one commit, one wake-up for the lot); their ids, in order.
        ``start_at``: each run's, as in :meth:`start_workflow_run`.

        All or nothing: bad inputs anywhere raise before anything is written. For
        idempotency keys, start runs one at a time (:meth:`submit_workflow_run`).
        """
        checked = load_definition(definition)
        start = start_time.checked(start_at)
        run_inputs = [
            json_values.checked_json(dict(each or {}), f"inputs[{index}]")
            for index, each in enumerate(inputs)
        ]
        with self._core.writes() as writes:
            run_ids = [
                create_run(
                    writes, checked, each, idempotency_key=None, actor=actor, start_at=start
                )[0]
                for each in run_inputs
            ]
        log.info("workflow runs submitted", extra={"runs": len(run_ids)})
        return run_ids

    def transition_workflow_run(
        self, run_id: UUID, transition: str, *, actor: str = ACTOR_USER
    ) -> bool:
        edge = WORKFLOW_RUN_MACHINE.get(transition)
        with self._core.writes() as writes:
            return writes.runs.move(run_id, edge, actor=text(actor, "actor")) is not None

    def cancel_workflow_run(self, run_id: UUID, *, actor: str = ACTOR_USER) -> bool:
        """Cancel a pending or running run and its unfinished tasks; False if the run
        had already finished (a second cancel included): a lost race, never an error.

        One conditional write covers both edges (``cancel_before_start``, ``cancel``),
        so a scheduler starting the run at the same moment cannot make it lose; the
        tasks are cancelled in the same transaction. ``UnknownRunError`` for no run.
        """
        with self._core.writes() as writes:
            if writes.runs.cancel(run_id, actor=actor) is None:
                advance.load_run(writes, run_id)  # UnknownRunError for a run that is not
                return False
            advance.advance(writes, run_id, random.random)
        return True

    def advance_workflow_run(
        self, run_id: UUID, *, rand: Callable[[], float] = random.random
    ) -> AdvanceResult:
        """One run's scheduling work in one transaction (see ``flowforge.app.advance``)."""
        with self._core.writes(marks_runs=False) as writes:
            return advance.advance(writes, run_id, rand, self._core.definitions)

    # --- task runs -----------------------------------------------------------------------

    def transition_task_run(
        self,
        task_run_id: UUID,
        transition: str,
        *,
        actor: str = ACTOR_USER,
        retry_delay_seconds: float = 0.0,
        worker_id: str | None = None,
        lease_seconds: float | None = None,
    ) -> bool:
        """Take an edge that needs no lease. ``IllegalTransitionError`` for a name not
        in the table, ``LeaseRequiredError`` for succeed/fail/cancel_running (use
        :meth:`finish_task_run`), ``ReaperOnlyTransitionError`` for reap_lease."""
        edge = transition_rule(transition)
        if edge.name == "claim":
            if worker_id is None or lease_seconds is None:
                raise errors.IllegalTransitionError(
                    "TaskRun", "claim", "pass worker_id and lease_seconds, or call claim_task_run"
                )
            return self.claim_task_run(task_run_id, worker_id, lease_seconds) is not None
        delay = non_negative(retry_delay_seconds, "retry_delay_seconds", MAX_SECONDS)
        actor = text(actor, "actor")
        with self._core.writes() as writes:
            row = writes.tasks.take_edge(edge, task_run_id, actor=actor, delay_seconds=delay)
        return row is not None

    def claim_task_run(
        self, task_run_id: UUID, worker_id: str, lease_seconds: float | None = None
    ) -> Claim | None:
        """READY to RUNNING with a new fencing token and a lease set by the database's
        clock, ``lease_seconds`` long (default: the task's own, from its definition);
        the claim, or None when another worker got there first."""
        seconds = None
        if lease_seconds is not None:
            seconds = positive(lease_seconds, "lease_seconds", MAX_LEASE_SECONDS)
        worker_id = text(worker_id, "worker_id")
        with self._core.writes() as writes:
            row = writes.tasks.claim(task_run_id, worker_id, seconds, last=True)
        if row is None:
            row = self._claim_limited(task_run_id, worker_id, seconds)
        if row is None:
            return None
        self._core.claims.remember(row)
        return Claim.of(row)

    def claim_task_run_and_its_run(
        self, task_run_id: UUID, worker_id: str, *, unless_known: Collection[UUID] = ()
    ) -> tuple[TaskRunRow | None, WorkflowRunRow | None]:
        """A worker's claim: :meth:`claim_task_run` with the task's own lease, returning
        the claimed row (``None``: not claimed) and, unless its id is in
        ``unless_known``, the task's run, all in the claim's round trip. A task that is
        not ready, a claim lost to another worker and a row without a lease of its own
        (created before schema version 5) all give ``None``: read the task to tell."""
        (row,), runs = self.claim_task_runs_and_their_runs(
            [task_run_id], worker_id, unless_known=unless_known
        )
        return row, next(iter(runs), None)

    def claim_task_runs_and_their_runs(
        self,
        task_run_ids: Sequence[UUID],
        worker_id: str,
        *,
        unless_known: Collection[UUID] = (),
    ) -> tuple[list[TaskRunRow | None], list[WorkflowRunRow]]:
        """:meth:`claim_task_run_and_its_run` for each task (distinct ids, at most
        ``limits.MAX_BATCH``), in ONE transaction: on PostgreSQL one round trip with its
        COMMIT, where one claim at a time costs a round trip and a commit each. Each
        claim is its own conditional write with its own event and fencing token: one
        that loses (``None``) leaves the others claimed. The claimed rows in the order
        given, and the runs of the tasks (claimed or not), each once, except those in
        ``unless_known``."""
        ids = batch_of_ids(task_run_ids, "task_run_ids")
        worker_id = text(worker_id, "worker_id")
        with self._core.writes() as writes:
            rows, runs = writes.tasks.claims_with_runs(ids, worker_id, unless_known, last=True)
        rows = [
            self._claim_limited(task_run_id, worker_id, None) if row is None else row
            for task_run_id, row in zip(ids, rows, strict=True)
        ]
        for row in rows:
            if row is not None:
                self._core.claims.remember(row)
        return rows, runs

    def _claim_limited(
        self, task_run_id: UUID, worker_id: str, lease_seconds: float | None
    ) -> TaskRunRow | None:
        """The claim of a task that ``task_claim`` did not take, as a limited task's
        (docs/scheduling/limits.md), in a transaction of its own: a task without a limit
        comes here only when its claim lost, so the hot path never pays for it. A claim
        a limit refused is ``None`` too: the task stays ready, its dispatch held until
        a slot frees."""
        with self._core.writes() as writes:
            claimed = writes.limits.claim(task_run_id, worker_id, lease_seconds)
        if claimed.refusal is not None:
            log.info(
                "claim refused by a concurrency limit; dispatch held",
                extra={
                    "task_run_id": str(task_run_id),
                    "worker_id": worker_id,
                    "limit": claimed.refusal.held_by,
                    "max_running": claimed.refusal.limit,
                    "running": claimed.refusal.running,
                },
            )
        return claimed.row

    def finish_task_run(
        self,
        task_run_id: UUID,
        fencing_token: int,
        outcome: str,
        result: Any = None,
        error: Mapping[str, str] | None = None,
        *,
        actor: str | None = None,
    ) -> bool:
        """succeed / fail / cancel_running, only while the row is running with this
        fencing token: a stale token writes nothing and returns False."""
        finish = Finish(task_run_id, fencing_token, outcome, result, error)
        (written,) = self.finish_task_runs([finish], actor=actor)
        return written

    def finish_task_runs(
        self, finishes: Sequence[Finish], *, actor: str | None = None
    ) -> list[bool]:
        """:meth:`finish_task_run` for each (distinct tasks, at most ``limits.MAX_BATCH``);
        whether each was written, in the order given. Every finish is checked before
        anything is written. The successes of tasks no other task depends on (a one-task
        run's, a fan-out's: the common case) go in ONE transaction, one round trip on
        PostgreSQL, each with all that follows it (its run started, succeeded or
        marked); every other finish then takes a transaction of its own, as it
        advances its run. Each write is conditional on its own fencing token: a stale
        one writes nothing and does not hold back the rest."""
        batch_of_ids([f.task_run_id for f in finishes], "finishes' task_run_ids")
        checked = [_CheckedFinish.of(finish) for finish in finishes]
        actor = text(actor or "worker", "actor")
        leaves = self._leaf_successes(checked)
        written = [False] * len(checked)
        if leaves:
            with self._core.writes(marks_runs=False) as writes:
                rows = writes.leaves.succeed(list(leaves.values()), actor=actor)
            for i, row in zip(leaves, rows, strict=True):
                written[i] = row is not None
        for i, finish in enumerate(checked):
            if i not in leaves:
                written[i] = self._finish_advancing(finish, actor)
        return written

    def _leaf_successes(self, checked: Sequence[_CheckedFinish]) -> dict[int, LeafSuccess]:
        """The successes (by position) whose whole advance can go in SQL with them: a
        task no other task depends on, claimed here, on a store that builds events in
        SQL. Every finish's claim leaves the memo (a finish ends it)."""
        leaves: dict[int, LeafSuccess] = {}
        for i, finish in enumerate(checked):
            claimed = self._core.claims.take(finish.task_run_id, finish.fencing_token)
            if finish.edge.name != "succeed" or not self._core.store.events_in_sql:
                continue
            leaf = advance.leaf_of(claimed, self._core.definitions)
            if leaf is not None:
                leaves[i] = LeafSuccess(
                    finish.task_run_id, finish.fencing_token, leaf, finish.result
                )
        return leaves

    def _finish_advancing(self, finish: _CheckedFinish, actor: str) -> bool:
        """One finish in its own transaction, the run advanced in it when that is quick
        and safe; otherwise marked for a scheduler (advance.advance_after_finish)."""
        # Only a success advances its run here, so only a success tries the run row
        # (first, then the task's: the lock order, advance.py says why); a failure
        # leaves the run row alone.
        succeeded = finish.edge.name == "succeed"
        with self._core.writes(marks_runs=False) as writes:
            run_state, row = writes.tasks.finish_trying_run(
                finish.task_run_id,
                finish.edge,
                finish.fencing_token,
                try_run=succeeded,
                actor=actor,
                result=finish.result,
                error=finish.error,
            )
            if row is not None:
                advance.advance_after_finish(
                    writes, row, run_state, self._core.definitions, random.random, actor=actor
                )
        return row is not None

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str | None = None,
    ) -> bool:
        """Extend the lease from the database's now, only while the token is current."""
        seconds = positive(lease_seconds, "lease_seconds", MAX_LEASE_SECONDS)
        actor = text(actor or "worker", "actor")
        with self._core.writes() as writes:
            row = writes.tasks.renew_lease(
                task_run_id, fencing_token, seconds, actor=actor, last=True
            )
        return row is not None

    def reclaim_task_run(self, task_run_id: UUID) -> bool:
        """The reaper's edge: RUNNING with an expired lease back to READY, token + 1."""
        with self._core.writes() as writes:
            row = writes.tasks.reclaim(task_run_id, actor=ACTOR_REAPER)
        return row is not None

    def time_out_task_run(self, task_run_id: UUID, fencing_token: int) -> bool:
        """The execution timeout: fail the attempt holding ``fencing_token`` (error type
        ``TimedOut``) if it is still running past its deadline by the database's clock;
        the retry policy then applies, as to any failure. False (nothing written) if the
        attempt finished, was reaped or cancelled first, or is not yet overdue."""
        with self._core.reads() as reads:
            task = reads.task_run(task_run_id)
        if task is None or task.fencing_token != fencing_token:
            return False
        error = timed_out_error(task.timeout_seconds, task.attempt)
        with self._core.writes() as writes:
            row = writes.tasks.time_out(task_run_id, fencing_token, error, actor=ACTOR_SCHEDULER)
        return row is not None

    def schedule_retry(
        self, task_run_id: UUID, delay_seconds: float = 0.0, *, actor: str = ACTOR_SCHEDULER
    ) -> bool:
        return self.transition_task_run(
            task_run_id, "schedule_retry", actor=actor, retry_delay_seconds=delay_seconds
        )

    def retry_ready(self, task_run_id: UUID, *, actor: str = ACTOR_SCHEDULER) -> bool:
        return self.transition_task_run(task_run_id, "retry_ready", actor=actor)


def create_run(
    writes: Writes,
    definition: WorkflowDefinition,
    inputs: dict[str, Any],
    *,
    idempotency_key: str | None,
    actor: str,
    rerun: RerunPlan | None = None,
    start_at: start_time.StartAt = None,
) -> tuple[UUID, bool]:
    """``writes.runs.create`` inside the run's creation span, whose context the run
    stores for its dispatches to carry (``flowforge.tracing``)."""
    with observe.announce.run_creation(definition.name, actor) as trace:
        run_id, created = writes.runs.create(
            definition,
            inputs,
            idempotency_key=idempotency_key,
            actor=actor,
            rerun=rerun,
            start_at=start_at,
            trace_context=trace.context,
        )
        trace.created(run_id, created)
    return run_id, created


def source_of(task: TaskRunRow) -> Provenance:
    """Where a succeeded task's result was produced: the task itself, unless it was
    carried over into its run, then wherever that came from (so a rerun of a rerun
    names the original, never the run in between)."""
    if task.carried_from_run_id is None:
        return Provenance(task.workflow_run_id, task.id, task.attempt)
    assert task.carried_from_task_run_id is not None
    assert task.carried_from_attempt is not None
    return Provenance(
        task.carried_from_run_id, task.carried_from_task_run_id, task.carried_from_attempt
    )


# --- argument checks: bad input is a clear error, before any I/O -------------------------


# The upper bounds keep a value inside the database's interval range (PostgreSQL's ends
# near 178 million years, SQLite's arithmetic at 2**63 microseconds): past them the
# error would come from the driver, after I/O began.


def positive(value: float, name: str, maximum: float) -> float:
    if not 0 < value <= maximum:
        raise ValueError(f"{name} must be > 0 and <= {maximum:g} seconds, got {value!r}")
    return float(value)


def non_negative(value: float, name: str, maximum: float) -> float:
    if not 0 <= value <= maximum:
        raise ValueError(f"{name} must be >= 0 and <= {maximum:g} seconds, got {value!r}")
    return float(value)


_Text = TypeVar("_Text", str, str | None)


def text(value: _Text, name: str) -> _Text:
    """``value`` if it is valid Unicode (no lone surrogate, which no database stores)."""
    if value is not None and (problem := json_values.unicode_problem(value)):
        raise ValueError(f"{name}: {problem}")
    return value


@dataclass(frozen=True, slots=True)
class Finish:
    """One task's finish for :meth:`Commands.finish_task_runs`: ``outcome`` is
    ``succeed``, ``fail`` or ``cancel_running``, under the claim's fencing token."""

    task_run_id: UUID
    fencing_token: int
    outcome: str
    result: Any = None
    error: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class _CheckedFinish:
    """A :class:`Finish` checked before its transaction opens: its edge, and the user
    JSON it stores (only a success stores a result and only a failure an error)."""

    task_run_id: UUID
    fencing_token: int
    edge: Transition
    result: Any
    error: dict[str, str] | None

    @classmethod
    def of(cls, finish: Finish) -> _CheckedFinish:
        edge = finish_rule(finish.outcome)
        succeeded, failed = edge.name == "succeed", edge.name == "fail"
        result = json_values.checked_json(finish.result, "result") if succeeded else None
        error = json_values.error_details(finish.error or {}) if failed else None
        return cls(finish.task_run_id, finish.fencing_token, edge, result, error)
