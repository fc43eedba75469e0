"""The application service: ``FlowForge``, the only way to change FlowForge's state.

One part per concept, composed over one :class:`~flowforge.app.core.ServiceCore` (the
event store, the store, this process's caches): :class:`Queries` (``app/queries.py``),
:class:`Commands` (``app/commands.py``), :class:`Outbox` (``app/outbox.py``),
:class:`Schedules` (``app/cron_schedules.py``), :class:`Limits` (``app/concurrency_limits.py``) and
:class:`Scheduling` (``app/scheduler_pass.py``). ``FlowForge`` opens persistence
(``app/event_store.py``), adds the rebuild (``app/rebuild.py``), and names each public
method once, below, with the part that implements it.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, overload
from uuid import UUID

from flowforge.app import archive, db_stats, rebuild, results
from flowforge.app.attempt_logs import AttemptLogs
from flowforge.app.caches import ClaimCache, DefinitionCache
from flowforge.app.commands import Commands
from flowforge.app.concurrency_limits import Limits
from flowforge.app.core import ServiceCore
from flowforge.app.cron_schedules import Schedules
from flowforge.app.event_store import EventStore, open_persistence
from flowforge.app.feed import Feed
from flowforge.app.outbox import Outbox
from flowforge.app.queries import REAP_BATCH, Queries
from flowforge.app.results import RebuildReport
from flowforge.app.scheduler_pass import REDISPATCH_AFTER_S, Scheduling
from flowforge.projections.db.protocols import Database
from flowforge.projections.store import Store

__all__ = ["REAP_BATCH", "REDISPATCH_AFTER_S", "FlowForge"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Part = TypeVar("_Part")
_V = TypeVar("_V")


@overload
def _on(
    part: str, method: Callable[Concatenate[_Part, _P], _R]
) -> Callable[Concatenate[Any, _P], _R]: ...


@overload
def _on(
    part: str, method: Callable[Concatenate[_Part, _P], _R], view: Callable[[_R], _V]
) -> Callable[Concatenate[Any, _P], _V]: ...


def _on(
    part: str,
    method: Callable[Concatenate[_Part, _P], _R],
    view: Callable[[_R], Any] | None = None,
) -> Callable[Concatenate[Any, _P], Any]:
    """``FlowForge``'s method that calls ``method`` on its part named ``part``, with the
    same signature and docstring. Looked up on the part at each call, so a test that
    replaces a part's method replaces it for the service too.

    ``view``: for a part that returns the store's rows, the function (``app/results.py``)
    that makes the service's views of them; the method returns what it returns."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> Any:
        result = getattr(getattr(self, part), name)(*args, **kwargs)
        return result if view is None else view(result)

    if view is not None:
        returns = typing.get_type_hints(view)["return"]
        call.__annotations__ = {**method.__annotations__, "return": returns}
        signature = inspect.signature(method)
        call.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return call


class FlowForge:
    """FlowForge's application service, configured by a database URL.

    ``migrate``: ``True`` creates the schema or applies the missing migrations (what
    ``flowforge db init`` / ``db migrate`` do); ``False`` creates nothing and refuses a
    database whose schema is missing, older or newer, naming the command that fixes it;
    ``None`` (the default) migrates the embedded SQLite default, so a script needs no
    set-up, and only checks a PostgreSQL database, which is migrated on purpose.

    ``listen_database_url``: where the scheduler's and publisher's wake-up listeners
    connect (PostgreSQL's LISTEN needs a session of its own); default the database URL.
    Set it to the server itself when the database URL goes through a PgBouncer in
    transaction pooling mode.

    ``prepared_statements``: PostgreSQL's server-side prepared statements (faster);
    ``False`` when the database URL goes through a pooler that cannot keep them, such
    as PgBouncer in transaction pooling mode (any version).
    """

    def __init__(
        self,
        database_url: str,
        *,
        migrate: bool | None = None,
        listen_database_url: str | None = None,
        prepared_statements: bool = True,
    ) -> None:
        opened = open_persistence(
            database_url,
            migrate=migrate,
            listen_database_url=listen_database_url,
            prepared_statements=prepared_statements,
        )
        self.core = ServiceCore(opened)
        self.queries = Queries(self.core)
        self.commands = Commands(self.core)
        self.outbox = Outbox(self.core)
        self.cron_schedules = Schedules(self.core)
        self.limits = Limits(self.core)
        self.feeds = Feed(self.core)
        self.logs = AttemptLogs(self.core)
        self.scheduling = Scheduling(
            self.core, self.queries, self.commands, self.outbox, self.cron_schedules
        )

    # --- persistence ----------------------------------------------------------------------

    @property
    def events(self) -> EventStore:
        """The event log (the ``eventsourcing`` application): the audit log."""
        return self.core.events

    @property
    def store(self) -> Store:
        """The projected tables: FlowForge's one persistence boundary."""
        return self.core.store

    @property
    def database(self) -> Database:
        """The database backend (its ``dialect`` and ``location``)."""
        return self.core.database

    @database.setter
    def database(self, database: Database) -> None:
        self.core.database = database

    @property
    def schema_version(self) -> int:
        return self.core.schema_version

    @property
    def deployment_id(self) -> str:
        """The deployment this database is: it names the dispatch topology
        (``BrokerConfig.for_deployment``) and is stamped on every dispatch."""
        return self.core.deployment_id

    @property
    def definitions(self) -> DefinitionCache:
        return self.core.definitions

    @property
    def claims(self) -> ClaimCache:
        return self.core.claims

    listening = _on("core", ServiceCore.listening, results.wakeup_bells)

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> FlowForge:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def rebuild_projections(self) -> RebuildReport:
        """Delete the projected rows and rebuild them from the log (``app/rebuild.py``)."""
        return rebuild.rebuild_projections(self.store, self.events)

    def logged_aggregates(self) -> dict[UUID, Any]:
        """Every run's, task run's and schedule's aggregate reconstituted from the log,
        by id, in one read of the log (``db rebuild``'s check; ``app/rebuild.py``)."""
        return rebuild.logged_aggregates(self.store, self.events)

    # --- bounded history: archive and restore (app/archive.py), db stats ------------------

    def archive_runs(
        self,
        to: Path,
        *,
        older_than: timedelta,
        limit: int = archive.MAX_RUNS_PER_FILE,
        progress: archive.Progress | None = None,
        between_batches: Callable[[int], None] | None = None,
    ) -> archive.ArchiveReport:
        """Move the runs that ended more than ``older_than`` ago (by the database's
        clock) into the archive file ``to``; or, if it exists, finish its deletes."""
        return archive.archive(
            self.store,
            to,
            older_than=older_than,
            source=self._archive_source(),
            limit=limit,
            progress=progress or archive.no_progress,
            between_batches=between_batches,
        )

    def restore_runs(
        self, path: Path, *, progress: archive.Progress | None = None
    ) -> archive.RestoreReport:
        """Put back every run of the archive file ``path`` that is not live."""
        return archive.restore(self.store, path, progress=progress or archive.no_progress)

    def apply_retention(
        self, older_than: timedelta, directory: Path, *, limit: int = archive.RETENTION_RUNS
    ) -> archive.ArchiveReport | None:
        """The scheduler's retention: archive up to ``limit`` runs that ended more than
        ``older_than`` ago into a new file in ``directory``; None if another archiver
        holds the lock (it will do the work)."""
        return archive.apply_retention(
            self.store,
            directory,
            older_than=older_than,
            source=self._archive_source(),
            name=f"flowforge-{self.deployment_id}",
            limit=limit,
        )

    def database_stats(self) -> db_stats.DatabaseStats:
        """The live database's size and the archive files (``flowforge db stats``)."""
        return db_stats.database_stats(self.store)

    def _archive_source(self) -> dict[str, object]:
        return {
            "source": {
                "dialect": self.database.dialect,
                "database": self.database.location,
                "deployment_id": self.deployment_id,
                "schema_version": self.schema_version,
            }
        }

    # --- the feed: every event in one order, by position (app/feed.py; docs/feed.md) ----
    feed = _on("feeds", Feed.feed)
    feed_head = _on("feeds", Feed.feed_head)
    follow = _on("feeds", Feed.follow)

    # --- queries: the projected tables and the audit log (app/queries.py) -----------------

    get_workflow_run = _on("queries", Queries.get_workflow_run)
    get_task_run = _on("queries", Queries.get_task_run)
    raise_if_archived = _on("queries", Queries.raise_if_archived)
    raise_if_task_archived = _on("queries", Queries.raise_if_task_archived)
    task_run_and_its_run = _on("queries", Queries.task_run_and_its_run)
    task_results = _on("queries", Queries.task_results)
    task_runs = _on("queries", Queries.task_runs)
    task_counts = _on("queries", Queries.task_counts)
    run_task_counts = _on("queries", Queries.run_task_counts)
    recent_runs = _on("queries", Queries.recent_runs)
    every_run = _on("queries", Queries.every_run)
    every_task_run = _on("queries", Queries.every_task_run)
    ready_task_runs = _on("queries", Queries.ready_task_runs)
    expired_leases = _on("queries", Queries.expired_leases)
    tasks_leased_by = _on("queries", Queries.tasks_leased_by)
    overdue_tasks = _on("queries", Queries.overdue_tasks)
    dispatches_of = _on("queries", Queries.dispatches_of)
    pending_dispatch_count = _on("queries", Queries.pending_dispatch_count)
    backlog = _on("queries", Queries.backlog)
    database_now = _on("queries", Queries.database_now)
    task_run_aggregate = _on("queries", Queries.task_run_aggregate)
    workflow_run_aggregate = _on("queries", Queries.workflow_run_aggregate)
    last_change = _on("queries", Queries.last_change)
    history = _on("queries", Queries.history)
    histories = _on("queries", Queries.histories)
    run_history = _on("queries", Queries.run_history)
    # One run at any size (issue #50): bounded reads for the CLI and the UI.
    task_run_by_key = _on("queries", Queries.task_run_by_key)
    task_runs_by_keys = _on("queries", Queries.task_runs_by_keys)
    task_outline = _on("queries", Queries.task_outline)
    task_runs_first_claimed = _on("queries", Queries.task_runs_first_claimed)
    task_states_as_of = _on("queries", Queries.task_states_as_of)
    run_summary = _on("queries", Queries.run_summary)
    mapped_task_counts = _on("queries", Queries.mapped_task_counts)
    mapped_tasks = _on("queries", Queries.mapped_tasks)
    task_runs_in_state = _on("queries", Queries.task_runs_in_state)
    task_runs_page = _on("queries", Queries.task_runs_page)
    run_history_count = _on("queries", Queries.run_history_count)
    run_transitions = _on("queries", Queries.run_transitions)
    get_workflow_run_brief = _on("queries", Queries.get_workflow_run_brief)
    recent_run_ids = _on("queries", Queries.recent_run_ids)
    stream_run_history = _on("queries", Queries.stream_run_history)

    # --- commands: runs and task runs (app/commands.py) -----------------------------------

    start_workflow_run = _on("commands", Commands.start_workflow_run)
    submit_workflow_run = _on("commands", Commands.submit_workflow_run)
    rerun_workflow_run = _on("commands", Commands.rerun_workflow_run)
    start_workflow_runs = _on("commands", Commands.start_workflow_runs)
    transition_workflow_run = _on("commands", Commands.transition_workflow_run)
    cancel_workflow_run = _on("commands", Commands.cancel_workflow_run)
    advance_workflow_run = _on("commands", Commands.advance_workflow_run)
    transition_task_run = _on("commands", Commands.transition_task_run)
    claim_task_run = _on("commands", Commands.claim_task_run)
    claim_task_run_and_its_run = _on(
        "commands", Commands.claim_task_run_and_its_run, results.claimed_views
    )
    claim_task_runs_and_their_runs = _on(
        "commands", Commands.claim_task_runs_and_their_runs, results.claims_views
    )
    finish_task_run = _on("commands", Commands.finish_task_run)
    finish_task_runs = _on("commands", Commands.finish_task_runs)
    renew_lease = _on("commands", Commands.renew_lease)
    reclaim_task_run = _on("commands", Commands.reclaim_task_run)
    time_out_task_run = _on("commands", Commands.time_out_task_run)
    schedule_retry = _on("commands", Commands.schedule_retry)
    retry_ready = _on("commands", Commands.retry_ready)

    # --- each attempt's captured output (app/attempt_logs.py; docs/logs.md) -------------

    record_attempt_log = _on("logs", AttemptLogs.record_attempt_log)
    attempt_logs = _on("logs", AttemptLogs.attempt_logs)

    # --- concurrency limits (app/concurrency_limits.py) -----------------------------------

    set_task_type_limit = _on("limits", Limits.set_task_type_limit)
    unset_task_type_limit = _on("limits", Limits.unset_task_type_limit)
    task_type_limits = _on("limits", Limits.task_type_limits)
    hold_of = _on("limits", Limits.hold_of)

    # --- the outbox (app/outbox.py) -------------------------------------------------------

    publish_pending_dispatches = _on("outbox", Outbox.publish_pending_dispatches)
    redispatch_stalled = _on("outbox", Outbox.redispatch_stalled)
    redispatch_lost = _on("outbox", Outbox.redispatch_lost)

    # --- the scheduler's pass (app/scheduler_pass.py) -------------------------------------

    schedule_once = _on("scheduling", Scheduling.schedule_once)
    advance_woken_runs = _on("scheduling", Scheduling.advance_woken_runs)
    advance_runs_with_retries_due = _on("scheduling", Scheduling.advance_runs_with_retries_due)
    advance_runs_due_to_start = _on("scheduling", Scheduling.advance_runs_due_to_start)
    seconds_to_next_timer = _on("scheduling", Scheduling.seconds_to_next_timer)
    reap_expired_leases = _on("scheduling", Scheduling.reap_expired_leases)
    time_out_overdue_tasks = _on("scheduling", Scheduling.time_out_overdue_tasks)

    # --- cron schedules (app/cron_schedules.py) -------------------------------------------

    add_schedule = _on("cron_schedules", Schedules.add_schedule, results.schedule_view)
    get_schedule = _on("cron_schedules", Schedules.get_schedule, results.schedule_view)
    list_schedules = _on("cron_schedules", Schedules.list_schedules, results.schedule_views)
    schedule_aggregate = _on("cron_schedules", Schedules.schedule_aggregate)
    pause_schedule = _on("cron_schedules", Schedules.pause_schedule)
    resume_schedule = _on("cron_schedules", Schedules.resume_schedule)
    delete_schedule = _on("cron_schedules", Schedules.delete_schedule)
    fire_due_schedules = _on("cron_schedules", Schedules.fire_due_schedules)
