"""The service's queries: the projected tables (never the log), and the audit log."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from flowforge import errors
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.app import archived_runs, audit, mapped, results
from flowforge.app.core import ServiceCore
from flowforge.app.results import (
    AuditEntry,
    BacklogView,
    DispatchView,
    MappedTaskView,
    OverdueAttempt,
    RunSummary,
    TaskRunView,
    WorkflowRunView,
)
from flowforge.app.scope import EVERY_RUN, Scope
from flowforge.bounds import row_limit

#: How many expired leases (or stalled ready tasks) one pass handles at most.
REAP_BATCH = 500
#: A run summary's tasks of each state a user acts on (``Queries.run_summary``).
SUMMARY_PER_STATE = 5
#: The states whose tasks a run summary names, in the order a user acts on them: what
#: failed, what runs, what waits for a retry, what waits to be claimed or to be ready.
ACTED_ON_STATES = ("failed", "running", "retrying", "ready", "pending")
#: The audit log of a run is read in pages: a small first one, so its first line comes
#: at once, then larger ones (each its own read; the log only grows at its end).
FIRST_HISTORY_PAGE = 200
HISTORY_PAGE = 5_000


def _unknown_task_run(task_run_id: UUID) -> errors.UnknownTaskRunError:
    return errors.UnknownTaskRunError(
        f"no task run {task_run_id}; list a run's tasks with `flowforge status RUN`"
    )


class Queries:
    """The service's reads: the projected tables as the application's views
    (``app/results.py``), and the audit log."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def get_workflow_run(self, run_id: UUID) -> WorkflowRunView:
        with self._core.reads() as reads:
            run = reads.workflow_run(run_id)
            archived = reads.archived_run(run_id) if run is None else None
        if archived is not None:
            raise archived_runs.archived_error(archived)
        if run is None:
            raise errors.UnknownRunError(
                f"no workflow run {run_id}; list runs with `flowforge runs`"
            )
        return results.workflow_run_view(run)

    def raise_if_archived(self, text: str) -> None:
        """``ArchivedRunError`` if ``text`` (a full or partial id no live run has) names
        one archived run; nothing otherwise."""
        part = text.strip().lower()
        if not part or any(c not in "0123456789abcdef-" for c in part):
            return
        with self._core.reads() as reads:
            found = reads.archived_runs_like(part)
        if len(found) == 1:
            raise archived_runs.archived_error(found[0])

    def get_workflow_run_brief(self, run_id: UUID) -> WorkflowRunView:
        """The run with its definition's ``tasks`` left out (its other keys kept): for a
        read that names the run, not its tasks (``status``, ``history``, ``why``); a big
        run's definition is megabytes, and decoding it cost what the run holds."""
        with self._core.reads() as reads:
            run = reads.workflow_run_brief(run_id)
            archived = reads.archived_run(run_id) if run is None else None
        if archived is not None:
            raise archived_runs.archived_error(archived)
        if run is None:
            raise errors.UnknownRunError(
                f"no workflow run {run_id}; list runs with `flowforge runs`"
            )
        return results.workflow_run_view(run)

    def recent_run_ids(self, limit: int = 20) -> list[UUID]:
        """The ids of the most recent runs, newest first (no row read)."""
        with self._core.reads() as reads:
            return reads.recent_run_ids(row_limit(limit))

    def get_task_run(self, task_run_id: UUID) -> TaskRunView:
        with self._core.reads() as reads:
            task = reads.task_run(task_run_id)
        if task is None:
            self.raise_if_task_archived(task_run_id.__eq__)
            raise _unknown_task_run(task_run_id)
        return results.task_run_view(task)

    def raise_if_task_archived(self, matches: Callable[[UUID], bool]) -> None:
        """``ArchivedRunError`` naming the task run and where its run went if exactly
        one task run ``matches`` accepts is in an archived run (found in the archive
        files' manifests); nothing otherwise."""
        with self._core.reads() as reads:
            files = reads.archive_file_names()
        found = archived_runs.runs_holding_task(files, matches) if files else {}
        if len(found) != 1:
            return
        ((task_id, run_id),) = found.items()
        with self._core.reads() as reads:
            row = reads.archived_run(run_id)
        if row is not None:
            raise archived_runs.archived_error(
                row, task=f"task run {task_id} is in an archived run: "
            )

    def task_run_and_its_run(
        self, task_run_id: UUID, *, unless_known: Collection[UUID] = ()
    ) -> tuple[TaskRunView, WorkflowRunView | None]:
        """A task run and its workflow run, unless the run's id is in ``unless_known``
        (a worker that has the run's definition already): one round trip where two
        were. Keep ``unless_known`` short (a worker passes its few latest runs)."""
        with self._core.reads() as reads:
            task, run = reads.task_run_and_its_run(task_run_id, unless_known)
        if task is None:
            raise _unknown_task_run(task_run_id)
        return results.task_run_view(task), None if run is None else results.workflow_run_view(run)

    def task_results(self, run_id: UUID, task_keys: Collection[str]) -> dict[str, Any]:
        """The results of some tasks of a run by key (``None`` for one not succeeded):
        a task's upstream results, read by key rather than the run's every row."""
        with self._core.reads() as reads:
            found = reads.task_results(run_id, task_keys)
            absent = [key for key in task_keys if key not in found]
            run = reads.workflow_run(run_id) if absent else None
            if run is not None:  # a mapped task has no row: its elements' results, listed
                definition = self._core.definitions.of(run)
                found.update(mapped.results(reads, definition, run_id, absent))
            return found

    def task_runs(self, run_id: UUID) -> list[TaskRunView]:
        with self._core.reads() as reads:
            return [results.task_run_view(t) for t in reads.task_runs_of(run_id)]

    def task_outline(
        self, run_id: UUID, changed_since: datetime | None = None
    ) -> list[results.TaskOutline]:
        """Every task of a run (changed at or after ``changed_since``, if given) in
        outline: its key, state and attempt only."""
        with self._core.reads() as reads:
            rows = reads.task_outline(run_id, changed_since)
        return [results.TaskOutline(r["task_key"], r["state"], r["attempt"]) for r in rows]

    def task_runs_first_claimed(
        self, run_id: UUID, at: datetime | None, limit: int
    ) -> list[TaskRunView]:
        """The ``limit`` tasks of a run first claimed (by ``at``), the first first."""
        with self._core.reads() as reads:
            rows = reads.task_runs_first_claimed(run_id, at, limit)
        return [results.task_run_view(t) for t in rows]

    def task_states_as_of(self, run_id: UUID, at: datetime) -> dict[str, tuple[str, int] | None]:
        """Each task of a run changed after ``at``: its state and attempt then, by key
        (``None``: not created yet). One query: each changed task's newest event at or
        before ``at`` (``reading.sql``), never a replay of the run's log."""
        with self._core.reads() as reads:
            found = reads.task_states_as_of(run_id, at)
        return {key: _state_then(then) for key, then in found.items()}

    def task_run_by_key(self, run_id: UUID, task_key: str) -> TaskRunView | None:
        """One task of a run by its key (None: the run has no such task)."""
        found = self.task_runs_by_keys(run_id, [task_key])
        return found[0] if found else None

    def task_runs_by_keys(self, run_id: UUID, task_keys: Collection[str]) -> list[TaskRunView]:
        """Some tasks of a run by key (a key it lacks is skipped): never the run's all."""
        with self._core.reads() as reads:
            return [results.task_run_view(t) for t in reads.task_runs_by_keys(run_id, task_keys)]

    def mapped_task_counts(self, run_id: UUID) -> dict[str, dict[str, int]]:
        """The run's mapped tasks' elements counted by state, by mapped task key (one
        pass over the run's index entries; empty for a run with no element)."""
        with self._core.reads() as reads:
            return reads.mapped_task_counts(run_id)

    def mapped_tasks(self, run: WorkflowRunView) -> list[MappedTaskView]:
        """The run's mapped tasks (``map_over``), in its definition's order: for each,
        its upstream's state and its elements counted by state. ``run`` with its
        definition's tasks (``get_workflow_run``, not the brief)."""
        definition = self._core.definitions.of(run)
        keys = mapped.mapped_keys(definition)
        if not keys:
            return []
        with self._core.reads() as reads:
            counts = reads.mapped_task_counts(run.id)
            upstream_keys = mapped.upstreams_of(definition, keys)
            upstreams = reads.task_runs_by_keys(run.id, upstream_keys)
        return [mapped.view(definition, key, upstreams, counts.get(key, {})) for key in keys]

    def run_task_counts(self, run: WorkflowRunView) -> dict[str, int]:
        """A run's tasks counted by state as a list of runs shows them, at any run size:
        its task runs (one aggregate query, no row read), and each mapped task not
        expanded yet (no task run until its upstream returns its list) as one pending
        task. ``run`` with its definition (``recent_runs``, ``get_workflow_run``)."""
        counts = self.task_counts(run.id)
        if any(task.get("map_over") for task in run.definition.get("tasks", ())):
            unexpanded = sum(view.elements is None for view in self.mapped_tasks(run))
            if unexpanded:
                counts["pending"] = counts.get("pending", 0) + unexpanded
        return counts

    def task_counts(self, run_id: UUID) -> dict[str, int]:
        """A run's tasks counted by state (one aggregate query, no row read): the web
        UI's runs page, at any run size."""
        with self._core.reads() as reads:
            return dict(reads.task_state_counts(run_id))

    def run_summary(self, run_id: UUID, per_state: int = SUMMARY_PER_STATE) -> RunSummary:
        """A run's tasks counted by state, and the few of each state a user acts on
        (``ACTED_ON_STATES``), the longest waiting first: bounded at any run size."""
        per_state = row_limit(per_state)
        with self._core.reads() as reads:
            counts = reads.task_state_counts(run_id)
            notable = {
                state: [
                    results.task_run_view(t)
                    for t in reads.task_runs_in_state(run_id, state, per_state)
                ]
                for state in ACTED_ON_STATES
                if counts.get(state)
            }
        return RunSummary(counts=counts, notable=notable)

    def task_runs_in_state(self, run_id: UUID, state: str, limit: int) -> list[TaskRunView]:
        """At most ``limit`` of a run's tasks in ``state``, the least recently changed first."""
        with self._core.reads() as reads:
            rows = reads.task_runs_in_state(run_id, state, row_limit(limit))
        return [results.task_run_view(t) for t in rows]

    def task_runs_page(
        self, run_id: UUID, *, state: str | None = None, after: str = "", limit: int = 100
    ) -> list[TaskRunView]:
        """A page of a run's tasks in key order (in ``state``, or all), after the key
        ``after``: the next page starts after the last key of this one."""
        limit = row_limit(limit)
        with self._core.reads() as reads:
            rows = reads.task_runs_page(run_id, state=state, after=after, limit=limit)
        return [results.task_run_view(t) for t in rows]

    def recent_runs(self, limit: int = 20) -> list[WorkflowRunView]:
        limit = row_limit(limit)
        with self._core.reads() as reads:
            return [results.workflow_run_view(r) for r in reads.recent_runs(limit)]

    def every_run(self) -> list[WorkflowRunView]:
        """Every run, oldest first, read at once: for a check that must see them all
        (``flowforge db rebuild``'s verification); a listing for people is :meth:`recent_runs`."""
        with self._core.reads() as reads:
            return [results.workflow_run_view(r) for r in reads.every_run()]

    def every_task_run(self) -> list[TaskRunView]:
        """Every task run, read at once, in no order (``flowforge db rebuild``'s
        verification: a read per run was a third of it)."""
        with self._core.reads() as reads:
            return [results.task_run_view(t) for t in reads.every_task_run()]

    def ready_task_runs(self, limit: int = 100) -> list[TaskRunView]:
        limit = row_limit(limit)
        with self._core.reads() as reads:
            return [results.task_run_view(t) for t in reads.ready_task_runs(limit)]

    def expired_leases(self, limit: int = REAP_BATCH, *, scope: Scope | None = None) -> list[UUID]:
        """Running tasks whose lease expired (only of the runs ``scope`` names, if any)."""
        limit = row_limit(limit)
        with self._core.reads() as reads:
            return reads.expired_leases(limit, (scope or EVERY_RUN).run_ids)

    def tasks_leased_by(self, worker_id: str, limit: int = 10) -> list[TaskRunView]:
        """The running tasks whose lease ``worker_id`` holds: for a worker starting under
        an id, what it held when it last stopped (a handler may have ended it)."""
        with self._core.reads() as reads:
            held = reads.tasks_leased_by(worker_id, row_limit(limit))
        return [results.task_run_view(t) for t in held]

    def overdue_tasks(self, limit: int = REAP_BATCH) -> list[OverdueAttempt]:
        """Running attempts past their execution timeout, by the database's clock."""
        with self._core.reads() as reads:
            return [results.overdue_attempt(o) for o in reads.overdue_tasks(row_limit(limit))]

    def dispatches_of(self, task_run_id: UUID) -> list[DispatchView]:
        with self._core.reads() as reads:
            return [results.dispatch_view(d) for d in reads.dispatches_of(task_run_id)]

    def pending_dispatch_count(self) -> int:
        with self._core.reads() as reads:
            return reads.pending_dispatch_count()

    def backlog(self) -> BacklogView:
        """What waits now: the metrics' one query of the database's state."""
        with self._core.reads() as reads:
            return results.backlog_view(reads.backlog())

    def database_now(self) -> datetime:
        """The database's clock: the one that decides leases and retry times."""
        with self._core.reads() as reads:
            return reads.now()

    # --- the audit log -------------------------------------------------------------------

    def task_run_aggregate(self, task_run_id: UUID) -> TaskRun:
        """The TaskRun reconstituted from its events alone."""
        aggregate: TaskRun = self._core.events.repository.get(task_run_id)
        return aggregate

    def workflow_run_aggregate(self, run_id: UUID) -> WorkflowRun:
        aggregate: WorkflowRun = self._core.events.repository.get(run_id)
        return aggregate

    def last_change(self) -> int:
        """The position of the newest event in the audit log (0 while it is empty): it
        grows with every transition, so a reader sees that something changed by one
        index probe (the web UI's live updates)."""
        return self._core.events.recorder.max_notification_id() or 0

    def history(self, task_run_id: UUID) -> list[AuditEntry]:
        """Every transition of one task run, every attempt, in order."""
        return self._audit([task_run_id])

    def histories(self, task_run_ids: Collection[UUID]) -> list[AuditEntry]:
        """Every transition of some task runs, in the log's order: a run's changed tasks
        only (the web UI's large run as of a moment), never its every task's."""
        return self._audit(list(task_run_ids)) if task_run_ids else []

    def run_history(self, run_id: UUID) -> list[AuditEntry]:
        """The audit log of a run: its own transitions and every task's, in time order."""
        self.get_workflow_run(run_id)
        task_ids = [t.id for t in self.task_runs(run_id)]
        return self._audit([run_id, *task_ids])

    def run_history_count(self, run_id: UUID) -> int:
        """How many transitions a run's audit log holds (its own and its tasks'), read
        from the rows' versions: no event is read."""
        run = self.get_workflow_run_brief(run_id)
        with self._core.reads() as reads:
            return run.version + reads.task_event_count(run_id)

    def run_transitions(self, run_id: UUID) -> list[AuditEntry]:
        """The run's own transitions after its creation (not its tasks'): its creation's
        event holds its whole definition; the run's row says when it was created."""
        with self._core.reads() as reads:
            stored = reads.stored_events_from_version(run_id, 2)
        return audit.entries(self._core.events, stored)

    def stream_run_history(
        self, run_id: UUID, *, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[AuditEntry]:
        """A run's audit log (its own transitions and its tasks') in the log's order, one
        entry at a time as pages of it are read: the first comes at once at any run
        size. ``since``: only the transitions at or after it; ``limit``: at most that many.

        The run's creation comes from its row and the actor its event names: its event
        holds the whole definition (megabytes for a big run), which nothing here shows."""
        with self._core.reads() as reads:
            creation, row = reads.run_creation(run_id), reads.workflow_run_brief(run_id)
        if creation is None or row is None:
            return
        position, actor = creation
        entries = itertools.chain(
            [audit.run_creation(results.workflow_run_view(row), actor)],
            self._run_events_after(run_id, position),
        )
        shown = (e for e in entries if since is None or e.at >= since)
        yield from itertools.islice(shown, limit)

    def _run_events_after(self, run_id: UUID, after: int) -> Iterator[AuditEntry]:
        """The run's events after the position ``after``, a page at a time."""
        page, keys = FIRST_HISTORY_PAGE, dict[UUID, str]()
        while True:
            with self._core.reads() as reads:
                rows = reads.run_events_page(run_id, after, page)
            yield from audit.in_log_order(self._core.events, (e for _, e in rows), keys)
            if len(rows) < page:
                return
            after, page = rows[-1][0], HISTORY_PAGE

    def _audit(self, aggregate_ids: list[UUID]) -> list[AuditEntry]:
        with self._core.reads() as reads:
            stored = reads.stored_events_of(aggregate_ids)
        return audit.entries(self._core.events, stored)


def _state_then(then: str | None) -> tuple[str, int] | None:
    if then is None:
        return None
    state, attempt = then.split(" ")
    return state, int(attempt)
