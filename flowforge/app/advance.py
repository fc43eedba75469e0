"""``advance_workflow_run``: one run's scheduling work, in one transaction.

Start the run (a delayed run only once its start time has come, by the database's clock:
until then nothing else happens to it); promote pending tasks whose dependencies all
succeeded (a delayed run's first tasks too, once it has started); schedule retries
(with the definition's backoff) for failed tasks that have attempts left, and make them
ready once due; derive the run's state; once the run is terminal, cancel what can no
longer run. Every step is a conditional write, so several schedulers may advance the
same run at once: a step another scheduler already took matches no row and is skipped.

Lock order, to rule out deadlocks: the run row first (``lock_workflow_run``: one advance
of a run at a time), then task rows in id order. The reaper touches one task row; a
user's cancel touches the run row first; a rebuild locks workflow_runs before
task_runs. A worker's finish *tries* the run row (SKIP LOCKED, never waiting) before
it writes its task row (:func:`advance_after_finish`).
This lock serialises the multi-row advances of a run; it is not on the transition
path, where every command is still one conditional write that the database decides.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from uuid import UUID

from flowforge import errors
from flowforge.aggregates import rules
from flowforge.aggregates.cancel_cause import (
    RUN_FAILED,
    CancelCause,
)
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.on_failure import OnFailure
from flowforge.aggregates.states import TaskRunState, WorkflowRunState
from flowforge.aggregates.task_run import ACTOR_SCHEDULER, is_due
from flowforge.app import archived_runs, fan_in, mapped
from flowforge.app.caches import DefinitionCache
from flowforge.app.cancels import cancel_leftovers, cancel_upstream_failed
from flowforge.app.results import AdvanceResult
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import Leaf, Writes

_T = TaskRunState
#: The run edge that records each terminal derived state.
_FINISH_RUN = {
    WorkflowRunState.SUCCEEDED: WORKFLOW_RUN_MACHINE.get("succeed"),
    WorkflowRunState.FAILED: WORKFLOW_RUN_MACHINE.get("fail"),
    WorkflowRunState.CANCELLED: WORKFLOW_RUN_MACHINE.get("cancel"),
}
_START = WORKFLOW_RUN_MACHINE.get("start")
#: The run states in which a success's finish advances its run itself.
_ADVANCED_BY_A_FINISH = frozenset({WorkflowRunState.PENDING, WorkflowRunState.RUNNING})
#: A changed task in one of these (effective) states decides the run's fate: only the
#: full advance, which reads every task, judges it.
_ENDS_THE_RUN = frozenset({_T.FAILED, _T.CANCELLED})


def leaf_of(claimed: TaskRunRow | None, definitions: DefinitionCache) -> Leaf | None:
    """The claimed task as a :class:`Leaf` if no task of its run depends on it (its run's
    definition already parsed here); else ``None``: its finish may have dependents to
    promote, which only the general advance does."""
    if claimed is None:
        return None
    definition = definitions.cached(claimed.workflow_run_id)
    if definition is None or definition.dependents(claimed.task_key):
        return None
    if definition.on_failure is not OnFailure.FAIL_FAST:
        # Its guards judge a run by its unfinished tasks, and under finish_branches a
        # task failed for good is one that never finishes: advance_changes judges it.
        return None
    return Leaf(claimed.workflow_run_id, claimed.task_key, claimed.task_type)


def advance(
    writes: Writes,
    run_id: UUID,
    rand: Callable[[], float],
    definitions: DefinitionCache | None = None,
) -> AdvanceResult:
    """Advance the run, waiting for another advance of it to finish first."""
    run = load_run(writes, run_id, lock=True)
    return _advance_locked(writes, run, rand, definitions or DefinitionCache(1))


def advance_woken(
    writes: Writes, run_id: UUID, rand: Callable[[], float], definitions: DefinitionCache
) -> AdvanceResult | None:
    """Advance a marked run, or ``None`` at once if another scheduler is advancing it
    (or it no longer exists): schedulers divide the woken runs instead of queueing.

    A pending run (a failure in a run its claim could not start, a mark of an older
    version's creation) is started; if none of its tasks has changed
    since its creation, that is all. A running run whose every mark names a task has
    only those tasks' consequences worked out (:func:`advance_changes`). Everything else
    takes the full advance: a mark of the run itself on a running run (a user's edge, or
    a mark written before marks named tasks, migration 3), a started run whose tasks
    moved before its start, a change only the whole run can judge."""
    state = writes.runs.try_lock_state(run_id)
    if state is None:
        return None
    # The marks go first, before any task row is read: see _advance_locked.
    changed = writes.marks.clear(run_id)
    result = AdvanceResult(run_id)
    if state is WorkflowRunState.PENDING:
        started, moved = writes.runs.start(run_id, actor=ACTOR_SCHEDULER)
        result.started = started is not None
        # A delayed run's first tasks are still pending: the full advance promotes them.
        if started is not None and not moved and started.start_at is None:
            return result
    elif state is WorkflowRunState.RUNNING and None not in changed:
        keys = {key for key in changed if key is not None}
        if advance_changes(writes, run_id, keys, definitions, rand, result):
            return result
    return _advance_locked(writes, load_run(writes, run_id), rand, definitions, result)


def advance_after_finish(
    writes: Writes,
    task: TaskRunRow,
    run_state: WorkflowRunState | None,
    definitions: DefinitionCache,
    rand: Callable[[], float],
    *,
    actor: str,
) -> AdvanceResult | None:
    """In a worker's finishing transaction: advance the task's run right here (promote
    its dependents, finish the run when it was the last task) if the task succeeded and
    the finish could lock the run's row at once (``run_state``, taken by the finish
    before its task row: ``TaskWrites.finish_trying_run``; ``None`` when another
    transaction held it, or when the finish was no success and did not try), starting
    it first if its claim could not; else mark the run for a scheduler, as every other
    transition does. ``None`` when it marked.

    Only a success: a failure's retry is scheduled by a scheduler, in a transaction of
    its own, so the failure and the retry keep distinct times in the task's history
    (``flowforge why --at`` a pasted time answers "failed"), and its due time becomes a
    timer the scheduler keeps.

    Deadlock-free: the finish tries the run row (SKIP LOCKED) before it writes its task
    row, the order every advance takes them in, and never waits for it.
    Fan-in stays exact: two finishes that each feed a task take the run's lock one
    after the other; the one that cannot take it marks the run, and the one that can
    sees every finish committed before it took the lock.
    """
    run_id = task.workflow_run_id
    result = AdvanceResult(run_id)
    advances = task.task_state is _T.SUCCEEDED and run_state in _ADVANCED_BY_A_FINISH
    if advances and run_state is WorkflowRunState.PENDING:
        # Its task's claim could not start the run (another transaction held its row
        # then). Start it here (its row is locked: this cannot lose) rather than leave
        # a scheduler two transactions (the start, then the full advance).
        result.started = writes.runs.move(run_id, _START, actor=actor) is not None
    if advances and advance_changes(
        writes,
        run_id,
        [task.task_key],
        definitions,
        rand,
        result,
        actor=actor,
        known=[task],
        finished_task_key=task.task_key,
    ):
        return result
    # The advance's last statement, when it got that far, marked the run itself if it
    # had to (the mark that follows it on its own, sent with it and the COMMIT).
    if not writes.recording.last_statement_sent:
        writes.marks.mark(run_id, task.task_key)
    return None


def advance_changes(
    writes: Writes,
    run_id: UUID,
    changed_keys: Collection[str],
    definitions: DefinitionCache,
    rand: Callable[[], float],
    result: AdvanceResult,
    *,
    actor: str = ACTOR_SCHEDULER,
    known: Sequence[TaskRunRow] = (),
    finished_task_key: str | None = None,
) -> bool:
    """The consequences of changes to some tasks of a RUNNING run whose row this
    transaction has locked, reading only those tasks, their dependents and the
    dependents' dependencies: promote what became eligible, retry what failed with
    attempts left, and succeed the run once every task has. O(changes), not O(tasks).
    ``known``: rows this transaction wrote last (a finish's task), not read again.
    ``finished_task_key``: a finish's task key; the run's completion is then the transaction's
    last statement, marking the run for that task when it returns ``False``
    (``RunWrites.succeed_when_complete``).

    ``False`` when that is not the whole story and nothing final was decided here: a
    changed task failed for good or was cancelled, a task was cancelled, or a step lost
    a race. Then the full advance (or, in a worker, a mark for one) judges the run.
    """
    definition = definitions.cached(run_id) or definitions.of(load_run(writes, run_id))
    keys = set(changed_keys)
    if keys and not _step_changes(writes, run_id, keys, definition, rand, result, actor, known):
        return False
    branches = _branches_after_a_failure(writes, run_id, definition)
    if branches is not None:
        return branches
    # The check and the run's succeed edge go together (one round trip); the edge
    # matches only if every task succeeded, whatever the check saw a moment before.
    completion, succeeded = writes.runs.succeed_when_complete(
        run_id, actor=actor, finished_task_key=finished_task_key
    )
    if succeeded is not None:
        result.finished_as = WorkflowRunState.SUCCEEDED.value
        return True
    return completion == "unfinished"


def _branches_after_a_failure(
    writes: Writes, run_id: UUID, definition: WorkflowDefinition
) -> bool | None:
    """Under finish_branches, a run with a task failed for good: whether the run is
    settled (``True``: a branch is still alive, and its own finish will judge the run)
    or must be judged by the full advance (``False``: nothing can run any more).
    ``None`` for every other run, which the completion check judges.

    The completion check (``succeed_when_complete``) counts a failed task as unfinished
    (one with attempts left is), so it would call such a run settled for ever. This
    reads every task of the run: a cost only finish_branches runs pay, on each change.
    """
    if definition.on_failure is OnFailure.FAIL_FAST:
        return None
    rows = writes.task_runs_of(run_id)
    states = mapped.states(definition, rows)
    if _T.FAILED not in states.values():
        return None
    dependencies = mapped.dependencies(definition, states)
    derived = rules.derive_run_state(definition.on_failure, states, dependencies)
    return not WORKFLOW_RUN_MACHINE.is_terminal(derived)


def _step_changes(
    writes: Writes,
    run_id: UUID,
    keys: set[str],
    definition: WorkflowDefinition,
    rand: Callable[[], float],
    result: AdvanceResult,
    actor: str,
    known: Sequence[TaskRunRow],
) -> bool:
    """Step the changed tasks, their dependents and the dependents' dependencies; False
    if a changed task ends the run or a step lost a race (see advance_changes)."""
    dependents = {key for changed in keys for key in definition.dependents(changed)}
    # A mapped task has no row (app/mapped.py): its dependants are one hop further.
    dependents |= {
        key
        for m in mapped.mapped_among(definition, dependents)
        for key in definition.dependents(m)
    }
    # A wide fan-in's dependent still waiting for a task not succeeded yet is not read,
    # nor its every dependency (app/fan_in.py): a finish's cost stays its own.
    dependents -= fan_in.waiting_fan_ins(writes, run_id, dependents - keys, definition)
    dependencies = {
        key for dependent in dependents for key in definition.task(dependent).depends_on
    }
    # A mapped task has no row (app/mapped.py). One a dependant waits for is judged by
    # its elements counted by state (an index scan, no row read: not its upstream's
    # whole list and every element's row on each element's finish), or, with no
    # element (not expanded, or an empty list), by its upstream's row.
    needed = keys | dependents | dependencies
    judged = set(mapped.mapped_among(definition, dependencies))
    counts = writes.mapped_task_counts(run_id) if judged else {}
    done = {m for m in judged if set(counts.get(m, {"none": 1})) == {"succeeded"}}
    needed |= mapped.upstreams_of(definition, judged - set(counts))
    have = [row for row in known if row.task_key in needed]
    missing = needed - {row.task_key for row in have}
    rows = sorted([*have, *writes.task_runs_by_keys(run_id, missing)], key=_by_id)
    if any(_effective_state(row) in _ENDS_THE_RUN for row in rows if row.task_key in keys):
        return False
    stepped = _step_tasks(
        writes, rows, definition, writes.now, rand, result, actor=actor, done=done
    )
    return stepped is not None


def _advance_locked(
    writes: Writes,
    run: WorkflowRunRow,
    rand: Callable[[], float],
    definitions: DefinitionCache,
    result: AdvanceResult | None = None,
) -> AdvanceResult:
    # The marks go first, before any task row is read. A writer commits its change and
    # its mark together, so every change whose mark this DELETE removes is visible to
    # the reads below (each statement reads what committed before it began); a change
    # committed later keeps its mark and wakes the run again. Deleting them last could
    # delete a mark whose change the reads missed: a lost wake-up.
    writes.marks.clear(run.id)
    result = result if result is not None else AdvanceResult(run.id)
    if run.run_state is WorkflowRunState.PENDING:
        started = writes.runs.move(run.id, _START, actor=ACTOR_SCHEDULER)
        result.started = result.started or started is not None
        run = started or load_run(writes, run.id)
        if run.run_state is WorkflowRunState.PENDING:
            # Its row is locked here, so only its start time can have refused the start
            # (run_move): a delayed run waits, its tasks untouched (none can have moved).
            result.waiting_to_start = True
            return result
    if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
        cancel_leftovers(writes, run.id, result, None)
        return result
    definition = definitions.of(run)
    now = writes.now()
    tasks = _step_tasks(writes, _tasks(writes, run.id), definition, lambda: now, rand, result)
    _finish_if_derived(writes, run, definition, tasks, result)
    return result


def load_run(writes: Writes, run_id: UUID, *, lock: bool = False) -> WorkflowRunRow:
    run = writes.runs.lock(run_id) if lock else writes.workflow_run(run_id)
    if run is None:
        archived = writes.archived_run(run_id)
        if archived is not None:
            raise archived_runs.archived_error(archived)
        raise errors.UnknownRunError(f"no workflow run {run_id}; list runs with `flowforge runs`")
    return run


def _tasks(writes: Writes, run_id: UUID) -> list[TaskRunRow]:
    return sorted(writes.task_runs_of(run_id), key=_by_id)


def _by_id(task: TaskRunRow) -> int:
    # Task rows are written in id order (the lock order, see the module's docstring).
    return task.id.int  # the order of UUIDs, compared as ints in C (a fan-out sorts 50,000)


def _step_tasks(
    writes: Writes,
    tasks: list[TaskRunRow],
    definition: WorkflowDefinition,
    now: Callable[[], datetime],
    rand: Callable[[], float],
    result: AdvanceResult,
    *,
    actor: str = ACTOR_SCHEDULER,
    done: Collection[str] = (),
) -> list[TaskRunRow] | None:
    """Take each task's next step; the tasks as they now are, or ``None`` if a step
    lost to another writer (whose change only a fresh read shows). ``now`` is asked
    only for a retry's due time (one query fewer when nothing is retrying). ``done``:
    mapped tasks known to have succeeded, whose element rows are not among ``tasks``."""
    succeeded = mapped.succeeded(definition, tasks) | set(done)
    eligible = [t for t in tasks if t.task_state is _T.PENDING and succeeded >= set(t.depends_on)]
    # All at once (a fan-out's thousands in one statement: TaskWrites.promote).
    promoted = writes.tasks.promote(eligible, actor=actor)
    after: list[TaskRunRow] | None = []
    for task in tasks:
        row: TaskRunRow | None = task
        if task.task_state is _T.PENDING and succeeded.issuperset(task.depends_on):
            row = promoted.get(task.id)
            if row:
                result.promoted.append(task.task_key)
        elif task.task_state is _T.FAILED and task.attempt < task.max_attempts:
            delay = definition.retry_policy_for(task.task_key).delay_for(task.attempt, rand())
            row = writes.tasks.schedule_retry(task.id, delay.total_seconds(), actor=actor)
            if row:
                result.retried.append(task.task_key)
        elif task.task_state is _T.RETRYING and is_due(task.retry_due_at, now()):
            row = writes.tasks.retry_ready(task.id, actor=actor)
            if row:
                result.made_ready.append(task.task_key)
        if row is None or after is None:
            after = None
        else:
            after.append(row)
    return after


def _finish_if_derived(
    writes: Writes,
    run: WorkflowRunRow,
    definition: WorkflowDefinition,
    stepped: list[TaskRunRow] | None,
    result: AdvanceResult,
) -> None:
    # Re-read only if a step above lost to another writer, whose change we must see
    # (its row lock made us wait for its commit) before deriving the run's state. When
    # every step won, the rows are current but for changes committed since the read:
    # those carry marks and wake the run again, and none can make a terminal state
    # derived here wrong (a terminal task never changes).
    tasks = stepped if stepped is not None else _tasks(writes, run.id)
    states = mapped.states(definition, tasks)
    branches = definition.on_failure is OnFailure.FINISH_BRANCHES
    dependencies = mapped.dependencies(definition, states) if branches else {}
    derived = rules.derive_run_state(definition.on_failure, states, dependencies)
    edge = _FINISH_RUN.get(derived)
    failed = [t.key for t in definition.tasks if states.get(t.key) is _T.FAILED]
    if edge is None and branches and failed:
        blocked = rules.downstream_of_failures(states, dependencies)
        cancel_upstream_failed(writes, tasks, blocked, (failed, dependencies), result)
    if edge is None or run.run_state is not WorkflowRunState.RUNNING:
        return
    if writes.runs.move(run.id, edge, actor=ACTOR_SCHEDULER):
        result.finished_as = derived.value
        # The run's terminal state is fixed first; cancelling what is left cannot change it.
        failing = derived is WorkflowRunState.FAILED and failed
        cause = CancelCause(RUN_FAILED, failed[0]) if failing else None
        cancel_leftovers(writes, run.id, result, cause)


_effective_state = mapped.effective_state
