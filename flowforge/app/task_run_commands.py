"""The commands that change a task run: its edges, claims, finishes, leases, timeouts.

Each follows the one rule (``flowforge.app.commands``): legality first, in the pure core,
then one transaction with the conditional write and its event; a lost race or a stale
fencing token returns ``False`` (or ``None``) and appends nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from flowforge import errors
from flowforge.aggregates import json_values
from flowforge.aggregates.definition import MAX_LEASE_SECONDS, MAX_SECONDS, WorkflowDefinition
from flowforge.aggregates.machines import Transition
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import (
    ACTOR_REAPER,
    ACTOR_SCHEDULER,
    ACTOR_USER,
    finish_rule,
    timed_out_error,
    transition_rule,
)
from flowforge.app import advance, mapped
from flowforge.app.arguments import non_negative, positive, text
from flowforge.app.caches import DefinitionCache
from flowforge.app.core import ServiceCore
from flowforge.app.results import Claim
from flowforge.bounds import batch_of_ids
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import LeafSuccess, Writes

# The logger the commands had before they were split in two: log filters select by it.
log = logging.getLogger("flowforge.app.commands")
_FAIL = finish_rule("fail")


class TaskRunCommands:
    """The commands that change a task run (the module says how)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

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
        claimed: list[TaskRunRow | None] = []
        leaves = self._leaf_successes(checked, claimed)
        written = [False] * len(checked)
        if leaves:
            with self._core.writes(marks_runs=False) as writes:
                rows = writes.leaves.succeed(list(leaves.values()), actor=actor)
            for i, row in zip(leaves, rows, strict=True):
                written[i] = row is not None
        for i, finish in enumerate(checked):
            if i not in leaves:
                written[i] = self._finish_advancing(finish, actor, claimed[i])
        return written

    def _leaf_successes(
        self, checked: Sequence[_CheckedFinish], taken: list[TaskRunRow | None]
    ) -> dict[int, LeafSuccess]:
        """The successes (by position) whose whole advance can go in SQL with them: a
        task no other task depends on, claimed here, on a store that builds events in
        SQL. Every finish's claim leaves the memo (a finish ends it), into ``taken``."""
        leaves: dict[int, LeafSuccess] = {}
        for i, finish in enumerate(checked):
            claimed = self._core.claims.take(finish.task_run_id, finish.fencing_token)
            taken.append(claimed)
            if finish.edge.name != "succeed" or not self._core.store.events_in_sql:
                continue
            leaf = advance.leaf_of(claimed, self._core.definitions)
            if leaf is not None:
                leaves[i] = LeafSuccess(
                    finish.task_run_id, finish.fencing_token, leaf, finish.result
                )
        return leaves

    def _finish_advancing(
        self, finish: _CheckedFinish, actor: str, claimed: TaskRunRow | None
    ) -> bool:
        """One finish in its own transaction, the run advanced in it when that is quick
        and safe; otherwise marked for a scheduler (advance.advance_after_finish). A
        success of a task that others are mapped over creates their elements in it
        (``app/mapped.py``), or is a failure if its result cannot be expanded."""
        with self._core.writes(marks_runs=False) as writes:
            # Read in the finish's transaction (one round trip, none when the claim and
            # the definition are in hand), so that the finish stays one commit.
            maps = _mapping_of(writes, finish, claimed, self._core.definitions)
            definition = None if maps is None else maps[0]
            if maps is not None:
                finish = finish.refused(*maps)
            # Only a success advances its run here, so only a success tries the run row
            # (first, then the task's: the lock order, advance.py says why); a failure
            # leaves the run row alone.
            succeeded = finish.edge.name == "succeed"
            run_state, row = writes.tasks.finish_trying_run(
                finish.task_run_id,
                finish.edge,
                finish.fencing_token,
                try_run=succeeded,
                actor=actor,
                result=finish.result,
                error=finish.error,
            )
            if row is not None and succeeded and definition is not None:
                mapped.expand(writes, row, definition, actor=actor)
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
        """The reaper's edge: RUNNING with an expired lease back to READY, token + 1; at
        the task's bound of lost workers, failed (``WorkerLost``) instead, for the retry
        policy (``aggregates/lost_workers.py``). The loss is counted either way."""
        return self.reap_task_run(task_run_id) is not None

    def reap_task_run(self, task_run_id: UUID) -> TaskRunState | None:
        """:meth:`reclaim_task_run`, saying where it left the task: ready, or failed at
        its bound of lost workers; None if it wrote nothing."""
        with self._core.writes() as writes:
            row = writes.tasks.reclaim(task_run_id, actor=ACTOR_REAPER)
        return None if row is None else row.task_state

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


def _mapping_of(
    writes: Writes,
    finish: _CheckedFinish,
    claimed: TaskRunRow | None,
    definitions: DefinitionCache,
) -> tuple[WorkflowDefinition, str] | None:
    """A succeeding task's run's definition and the task's key, if the run maps a task
    over its result (``None``: not a success, nothing to expand, or no such task)."""
    if finish.edge.name != "succeed":
        return None
    task = claimed if claimed is not None else writes.task_run(finish.task_run_id)
    if task is None:
        return None
    definition = definitions.cached(task.workflow_run_id)
    if definition is None:
        run = writes.workflow_run(task.workflow_run_id)
        if run is None:
            return None
        definition = definitions.of(run)
    return (definition, task.task_key) if definition.mapped_over(task.task_key) else None


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

    def refused(self, definition: WorkflowDefinition, key: str) -> _CheckedFinish:
        """This success of ``key``, or a failure (``MapOverError``) if tasks are mapped
        over it and its result is no list or too long: nothing is expanded then."""
        error = mapped.refused_result(definition, key, self.result)
        if error is None:
            return self
        return _CheckedFinish(self.task_run_id, self.fencing_token, _FAIL, None, error)

    @classmethod
    def of(cls, finish: Finish) -> _CheckedFinish:
        edge = finish_rule(finish.outcome)
        succeeded, failed = edge.name == "succeed", edge.name == "fail"
        result = json_values.checked_json(finish.result, "result") if succeeded else None
        error = json_values.error_details(finish.error or {}) if failed else None
        return cls(finish.task_run_id, finish.fencing_token, edge, result, error)
