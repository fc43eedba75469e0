"""The commands that create, rerun, cancel and advance a workflow run.

A run's creation (submit, bulk submit, rerun) builds the run's plan
(``flowforge.aggregates.run_plan``: every decision about what the creation writes) from
the definition and the request, then :func:`create_run` writes it in ONE transaction,
inside the run's creation span. The other commands follow the one rule
(``flowforge.app.commands``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any
from uuid import UUID

from flowforge import errors, observe
from flowforge.aggregates import idempotency, json_values, rerun, run_plan, start_time
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.run_plan import RunPlan
from flowforge.aggregates.states import TaskRunState
from flowforge.aggregates.task_run import ACTOR_USER, Provenance
from flowforge.app import advance
from flowforge.app.arguments import text
from flowforge.app.concurrency_limits import retrying_lock_waits
from flowforge.app.core import ServiceCore
from flowforge.app.definition_files import load_definition
from flowforge.app.results import AdvanceResult, StartedRun
from flowforge.projections.tables import TaskRunRow
from flowforge.projections.writes import Writes

# The logger the commands had before they were split in two: log filters select by it.
log = logging.getLogger("flowforge.app.commands")


class RunCommands:
    """The commands that change a workflow run (the module says how)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

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
        plan = run_plan.submitted_run(
            checked,
            run_inputs,
            idempotency_key=text(idempotency_key, "idempotency_key"),
            actor=text(actor, "actor"),
            start_at=start,
        )
        run_id, created = self._create(plan)
        if not created:
            self._check_same_submission(run_id, checked, run_inputs, idempotency_key)
        log.info(
            "workflow run submitted",
            extra={"workflow_run_id": str(run_id), "run_created": created},
        )
        return StartedRun(run_id, created)

    def _create(self, plan: RunPlan) -> tuple[UUID, bool]:
        """:func:`create_run` in a transaction of its own, tried again while it gives up
        the bounded wait for ``task_runs``' lock that the first run limiting a type
        takes (docs/scheduling/limits.md, "The lock a change takes")."""

        def attempt() -> tuple[UUID, bool]:
            with self._core.writes() as writes:
                return create_run(writes, plan)

        return retrying_lock_waits(
            attempt, f"a run of {plan.definition.name} could not be created"
        )

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

        def attempt() -> tuple[UUID, bool, int]:
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
                rerun_plan = rerun.plan(old.id, old.run_state, definition, succeeded, keys)
                plan = run_plan.rerun_run(
                    definition,
                    old.inputs,
                    rerun_plan,
                    idempotency_key=idempotency_key,
                    actor=actor,
                )
                return (*create_run(writes, plan), len(rerun_plan.carried))

        new_run_id, created, carried = retrying_lock_waits(
            attempt, f"a rerun of run {run_id} could not be created"
        )
        log.info(
            "workflow run rerun",
            extra={
                "workflow_run_id": str(new_run_id),
                "rerun_of": str(run_id),
                "carried_over": carried,
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
        plans = run_plan.submitted_runs(checked, run_inputs, actor=actor, start_at=start)

        def attempt() -> list[UUID]:
            with self._core.writes() as writes:
                return [create_run(writes, plan)[0] for plan in plans]

        run_ids = retrying_lock_waits(attempt, f"{len(plans)} runs could not be created")
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


def create_run(writes: Writes, plan: RunPlan) -> tuple[UUID, bool]:
    """``writes.runs.create`` of ``plan`` inside the run's creation span, whose context
    the run stores for its dispatches to carry (``flowforge.observe``)."""
    definition, actor = plan.definition, plan.actor
    with observe.announce.run_creation(definition.name, actor) as trace:
        run_id, created = writes.runs.create(plan.traced(trace.context))
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


# The upper bounds keep a value inside the database's interval range (PostgreSQL's ends
# near 178 million years, SQLite's arithmetic at 2**63 microseconds): past them the
# error would come from the driver, after I/O began.


def positive(value: float, name: str, maximum: float) -> float:
    if not 0 < value <= maximum:
        raise ValueError(f"{name} must be > 0 and <= {maximum:g} seconds, got {value!r}")
    return float(value)
