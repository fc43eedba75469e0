"""The scheduler's work: advance the runs that changed, and the safety net.

Event-driven: a transition that can change what its run should do next marks the run
(``run_wakeups``) in its own transaction and wakes the schedulers on commit
(``flowforge/projections/wakeups.py``). :meth:`Scheduling.advance_woken_runs` advances
only marked runs, clearing each run's marks in its advance's transaction, so a pass costs
O(changes), not O(active runs). The periodic :meth:`Scheduling.schedule_once` is the
safety net for what no commit announces: leases that expire, retries that fall due,
delayed runs whose start time comes, and dispatches that stalled; it also advances any
marked run whose wake-up was lost.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from uuid import UUID

from flowforge import observe
from flowforge.aggregates.states import TaskRunState
from flowforge.app import advance
from flowforge.app.commands import Commands
from flowforge.app.core import ServiceCore
from flowforge.app.cron_schedules import Schedules, fires_schedules
from flowforge.app.outbox import Outbox
from flowforge.app.ports import QueueProbe
from flowforge.app.queries import REAP_BATCH, Queries
from flowforge.app.results import ScheduleSummary
from flowforge.app.scope import Scope

#: A ready task whose dispatch was published this long ago is a candidate for the
#: redispatch net, which replaces it only if its queue lost it (``Outbox.redispatch_lost``);
#: ``flowforge scheduler --redispatch-after``.
REDISPATCH_AFTER_S = 300.0
#: Woken runs read per batch; the pass takes batches until the marks run out.
WOKEN_BATCH = 200
#: Woken runs advanced per transaction: one commit (one WAL flush) for many runs, where
#: one per run made the scheduler the bottleneck of many small runs (each start and
#: each finish a flush, one after the other). Bounded, because the batch's run rows
#: stay locked until it commits (a finish meanwhile marks its run instead).
ADVANCES_PER_TRANSACTION = 50


class Scheduling:
    """The scheduler's pass, over the service's queries, commands and outbox."""

    def __init__(
        self,
        core: ServiceCore,
        queries: Queries,
        commands: Commands,
        outbox: Outbox,
        schedules: Schedules,
    ) -> None:
        self._core = core
        self._queries = queries
        self._commands = commands
        self._outbox = outbox
        self._schedules = schedules

    def schedule_once(
        self,
        *,
        redispatch_after: float = REDISPATCH_AFTER_S,
        probe: QueueProbe | None = None,
        scope: Scope | None = None,
    ) -> ScheduleSummary:
        """One full pass: reap expired leases, fail attempts past their execution
        timeout, advance every marked run, every run with a retry due and every
        delayed run whose start time has come, and redispatch ready tasks whose
        dispatch was lost (``Outbox.redispatch_lost``: only with a ``probe`` that asks
        the broker how many messages a queue holds). With a ``scope`` (an
        embedded runner: its own run, or the runs it has handlers for), each step acts
        only on the runs the scope takes in (``app/scope.py``). Without a scope it also
        fires the cron schedules that are due (``app/cron_schedules.py``)."""
        summary = ScheduleSummary(reaped=len(self.reap_expired_leases(scope=scope)))
        summary.timed_out = len(self.time_out_overdue_tasks(scope=scope))
        if fires_schedules(scope):
            summary.fired = len(self._schedules.fire_due_schedules())
        self.advance_woken_runs(summary, scope=scope)
        self.advance_runs_with_retries_due(summary, scope=scope)
        self.advance_runs_due_to_start(summary, scope=scope)
        if probe is not None:
            redispatched = self._outbox.redispatch_lost(redispatch_after, probe, scope=scope)
            summary.redispatched = len(redispatched)
        return summary

    def advance_woken_runs(
        self,
        summary: ScheduleSummary | None = None,
        *,
        batch: int = WOKEN_BATCH,
        rand: Callable[[], float] = random.random,
        scope: Scope | None = None,
    ) -> ScheduleSummary:
        """Advance the marked runs, batch after batch while the last one was full and
        advanced something; a run another scheduler holds is left to it. A run outside
        ``scope`` keeps its marks for a scheduler whose scope takes it in (a batch of
        only such runs ends the pass: an embedded runner beside that many other marked
        runs advances its own at the next pass's luck of the order)."""
        summary = summary if summary is not None else ScheduleSummary()
        while True:
            with self._core.reads() as reads:
                runs = reads.woken_runs(batch)
            mine = [run_id for run_id in runs if self._core.covers(scope, run_id)]
            step = ADVANCES_PER_TRANSACTION
            chunks = [mine[i : i + step] for i in range(0, len(mine), step)]
            advanced = sum(self._advance_woken(chunk, summary, rand) for chunk in chunks)
            if len(runs) < batch or not advanced:
                return summary

    def _advance_woken(
        self, run_ids: list[UUID], summary: ScheduleSummary, rand: Callable[[], float]
    ) -> int:
        """Advance the runs in ONE transaction; how many it advanced (a run another
        transaction holds is skipped). Counted only once committed: a failure rolls
        every advance of the batch back, marks included, for the next pass to redo."""
        results = []
        with self._core.writes(marks_runs=False) as writes:
            for run_id in run_ids:
                result = advance.advance_woken(writes, run_id, rand, self._core.definitions)
                if result is not None:
                    results.append(result)
        for result in results:
            summary.add(result)
        return len(results)

    def advance_runs_with_retries_due(
        self, summary: ScheduleSummary, *, scope: Scope | None = None
    ) -> None:
        with self._core.reads() as reads:
            runs = reads.runs_with_retries_due(REAP_BATCH)
        for run_id in runs:
            if self._core.covers(scope, run_id):
                summary.add(self._commands.advance_workflow_run(run_id))

    def advance_runs_due_to_start(
        self, summary: ScheduleSummary, *, scope: Scope | None = None
    ) -> None:
        """Start the delayed runs whose start time has come (the database's clock) and
        promote their first tasks; several schedulers may race for one: its advance's
        conditional writes let exactly one start it."""
        with self._core.reads() as reads:
            runs = reads.runs_due_to_start(REAP_BATCH)
        for run_id in runs:
            if self._core.covers(scope, run_id):
                summary.add(self._commands.advance_workflow_run(run_id))

    def seconds_to_next_timer(self, *, scope: Scope | None = None) -> float | None:
        """Seconds until the next retry falls due, lease expires, attempt times out or
        delayed run may start, or (without a scope) the next cron schedule fires, by
        the database's clock; None when nothing is waiting on a timer."""
        with self._core.reads() as reads:
            timers = [reads.seconds_to_next_timer()]
            if fires_schedules(scope):
                timers.append(reads.seconds_to_next_fire())
        known = [timer for timer in timers if timer is not None]
        return min(known) if known else None

    def time_out_overdue_tasks(self, *, scope: Scope | None = None) -> list[UUID]:
        """Fail every attempt running past its execution timeout (only of the runs
        ``scope`` takes in), each with its own fencing token: one that finished or was
        reaped meanwhile is left alone. The failures mark their runs, which the same
        pass then advances (a retry, or the run's end)."""
        timed_out = [
            task.task_run_id
            for task in self._queries.overdue_tasks(REAP_BATCH)
            if self._core.covers(scope, task.workflow_run_id)
            and self._commands.time_out_task_run(task.task_run_id, task.fencing_token)
        ]
        observe.announce.attempts_timed_out(len(timed_out))
        return timed_out

    def reap_expired_leases(self, *, scope: Scope | None = None) -> list[UUID]:
        """Reclaim every task whose lease expired by the database's clock (only of the
        runs ``scope`` names, if it names runs: another run's lease is its own
        runner's to reclaim); a task at its bound of lost workers is failed instead
        (``WorkerLost``), and counted apart too."""
        candidates = self._queries.expired_leases(REAP_BATCH, scope=scope)
        reaped, lost_too_often = [], 0
        for task_run_id in candidates:
            state = self._commands.reap_task_run(task_run_id)
            if state is not None:
                reaped.append(task_run_id)
                lost_too_often += state is TaskRunState.FAILED
        observe.announce.leases_reaped(len(reaped))
        observe.announce.workers_lost_too_often(lost_too_often)
        return reaped
