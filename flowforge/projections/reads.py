"""The store's queries, in the domain's words: typed rows in, typed rows out.

Every query reads the projected tables inside one open transaction (the event log only
for the audit log's events of some aggregates, :meth:`Reads.stored_events_of`);
:class:`Reads` is what :meth:`Store.read` yields, and the write transaction
(:class:`~flowforge.projections.writes.Writes`) can read the same way.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from flowforge.projections import feed
from flowforge.projections.db.protocols import Row, Transaction
from flowforge.projections.statements import UNFINISHED_TASK_STATES
from flowforge.projections.tables import OutboxRow, ScheduleRow, TaskRunRow, WorkflowRunRow

_R = TypeVar("_R", TaskRunRow, WorkflowRunRow, ScheduleRow)
RunCompletion = Literal["unfinished", "cancelled", "succeeded"]


@dataclass(frozen=True, slots=True)
class OverdueTask:
    """A running attempt past its execution timeout: the task, the token of the attempt
    (the timeout fails only that attempt), and its run."""

    task_run_id: UUID
    fencing_token: int
    workflow_run_id: UUID


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waits, now: unfinished tasks by state; dispatches written and not yet
    confirmed by the broker, and how long the oldest has waited (0 with none)."""

    tasks_by_state: dict[str, int]
    outbox_pending: int
    outbox_oldest_age_s: float


class Reads:
    """Queries inside one open transaction."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def stored_events_of(self, aggregate_ids: Collection[UUID]) -> list[StoredEvent]:
        """Every stored event of the given aggregates, in one read: each aggregate's in
        version order (a run's audit log reads its own and its tasks' at once)."""
        if not aggregate_ids:
            return []
        params = {"originator_ids": id_list(aggregate_ids)}
        return [stored_event(row) for row in self._tx.run("select_stored_events_of", params)]

    def every_stored_event(self) -> list[StoredEvent]:
        """Every stored event, in the log's order, in one read (the rebuild's check)."""
        return [stored_event(row) for row in self._tx.run("select_stored_events")]

    def attempt_log_rows(self, task_run_id: UUID) -> list[Row]:
        """The task's attempts' captured outputs, in the order of their claims."""
        return self._tx.run("select_attempt_logs", {"task_run_id": task_run_id})

    def now(self) -> datetime:
        """The database's clock: the one that decides leases and retry times."""
        (row,) = self._tx.run("db_now")
        value: datetime = row["db_now"]
        return value

    def archived_run(self, run_id: UUID) -> Row | None:
        """Where the run went, if it was archived (``archived_runs``; app/archive.py)."""
        rows = self._tx.run("select_archived_run", {"workflow_run_id": run_id})
        return rows[0] if rows else None

    def archived_runs_like(self, part: str) -> list[Row]:
        """At most two archived runs whose id (with its hyphens) starts or ends with
        ``part``, a user's short id (lower-case hex and hyphens only: no wildcard)."""
        params = {"starts": f"{part}%", "ends": f"%{part}"}
        return self._tx.run("select_archived_runs_like", params)

    def archive_file_names(self) -> list[str]:
        """The archive files holding runs still archived."""
        return [row["archive_file"] for row in self._tx.run("select_archive_file_names")]

    def workflow_run(self, run_id: UUID) -> WorkflowRunRow | None:
        return first_row(WorkflowRunRow, self._tx.run("select_workflow_run", {"id": run_id}))

    def task_run(self, task_run_id: UUID) -> TaskRunRow | None:
        return first_row(TaskRunRow, self._tx.run("select_task_run", {"id": task_run_id}))

    def task_run_and_its_run(
        self, task_run_id: UUID, known_runs: Collection[UUID]
    ) -> tuple[TaskRunRow | None, WorkflowRunRow | None]:
        """The task run and its run, in one round trip; no run row if the run's id is in
        ``known_runs`` (or there is no such task)."""
        task_rows, run_rows = self._tx.run_each(
            [
                ("select_task_run", {"id": task_run_id}),
                run_of_task_unless_known(task_run_id, known_runs),
            ]
        )
        return first_row(TaskRunRow, task_rows), first_row(WorkflowRunRow, run_rows)

    def task_runs_of(self, run_id: UUID) -> list[TaskRunRow]:
        """A run's task runs, in creation order."""
        rows = self._tx.run("select_task_runs_of_run", {"workflow_run_id": run_id})
        return [TaskRunRow.from_mapping(r) for r in rows]

    def task_results(self, run_id: UUID, task_keys: Collection[str]) -> dict[str, Any]:
        """The results of the named tasks of a run (``None`` until one succeeds), by key;
        a key the run does not have is absent."""
        if not task_keys:
            return {}
        rows = self._tx.run(
            "select_task_results", {"workflow_run_id": run_id, "task_keys": sorted(task_keys)}
        )
        return {row["task_key"]: row["result"] for row in rows}

    def task_runs_by_keys(self, run_id: UUID, task_keys: Collection[str]) -> list[TaskRunRow]:
        """The named task runs of a run (a key it does not have is skipped)."""
        if not task_keys:
            return []
        params = {"workflow_run_id": run_id, "task_keys": sorted(task_keys)}
        return [
            TaskRunRow.from_mapping(r) for r in self._tx.run("select_task_runs_by_keys", params)
        ]

    def some_unfinished_task_keys(self, run_id: UUID, limit: int) -> set[str]:
        """The keys of at most ``limit`` tasks of a run not succeeded yet (any of them)."""
        params = {"workflow_run_id": run_id, "limit": limit}
        return {r["task_key"] for r in self._tx.run("select_some_unfinished_task_keys", params)}

    # --- one run at any size (sql/reading.sql) -----------------------------------------

    def workflow_run_brief(self, run_id: UUID) -> WorkflowRunRow | None:
        """The run's row with its definition's ``tasks`` left out (the rest of it kept)."""
        return first_row(WorkflowRunRow, self._tx.run("select_workflow_run_brief", {"id": run_id}))

    def recent_run_ids(self, limit: int) -> list[UUID]:
        return _ids(self._tx.run("select_recent_run_ids", {"limit": limit}))

    def stored_events_from_version(self, aggregate_id: UUID, version: int) -> list[StoredEvent]:
        """An aggregate's events from ``version`` on, in version order."""
        params = {"originator_id": aggregate_id, "version": version}
        rows = self._tx.run("select_stored_events_from_version", params)
        return [stored_event(row) for row in rows]

    def task_state_counts(self, run_id: UUID) -> dict[str, int]:
        """A run's tasks counted by state (a state no task is in is absent)."""
        rows = self._tx.run("select_task_state_counts", {"workflow_run_id": run_id})
        return {row["state"]: int(row["tasks"]) for row in rows}

    def mapped_task_counts(self, run_id: UUID) -> dict[str, dict[str, int]]:
        """A run's mapped tasks' elements counted by state, by mapped task key."""
        rows = self._tx.run("select_mapped_task_counts", {"workflow_run_id": run_id})
        found: dict[str, dict[str, int]] = {}
        for row in rows:
            found.setdefault(row["mapped_task"], {})[row["state"]] = int(row["tasks"])
        return found

    def task_runs_in_state(self, run_id: UUID, state: str, limit: int) -> list[TaskRunRow]:
        """At most ``limit`` of a run's tasks in ``state``, the least recently changed first."""
        params = {"workflow_run_id": run_id, "state": state, "limit": limit}
        return [
            TaskRunRow.from_mapping(r) for r in self._tx.run("select_task_runs_in_state", params)
        ]

    def task_runs_page(
        self, run_id: UUID, *, state: str | None, after: str, limit: int
    ) -> list[TaskRunRow]:
        """At most ``limit`` of a run's tasks (in ``state``, or all) in key order, after
        the key ``after`` ('' for the first page)."""
        params = {"workflow_run_id": run_id, "state": state, "after": after, "limit": limit}
        return [TaskRunRow.from_mapping(r) for r in self._tx.run("select_task_runs_page", params)]

    def task_event_count(self, run_id: UUID) -> int:
        """How many events a run's tasks have in the log (each row's version)."""
        (row,) = self._tx.run("select_task_event_count", {"workflow_run_id": run_id})
        return int(row["events"])

    def run_creation(self, run_id: UUID) -> tuple[int, str] | None:
        """The position in the log of a run's creation event, and the actor it names
        (None: no such run)."""
        rows = self._tx.run("select_run_creation", {"originator_id": run_id})
        return (int(rows[0]["position"]), str(rows[0]["actor"])) if rows else None

    def run_events_page(
        self, run_id: UUID, after: int, limit: int
    ) -> list[tuple[int, StoredEvent]]:
        """At most ``limit`` events of a run and its tasks in the log's order, after the
        position ``after``: each with its position (the next page's ``after``)."""
        params = {
            "originator_id": run_id,
            "workflow_run_id": run_id,
            "after": after,
            "limit": limit,
        }
        return [
            (int(row["position"]), stored_event(row))
            for row in self._tx.run("select_run_events_page", params)
        ]

    def recent_runs(self, limit: int) -> list[WorkflowRunRow]:
        rows = self._tx.run("select_recent_runs", {"limit": limit})
        return [WorkflowRunRow.from_mapping(r) for r in rows]

    def every_run(self) -> list[WorkflowRunRow]:
        rows = self._tx.run("select_every_run")
        return [WorkflowRunRow.from_mapping(r) for r in rows]

    def every_task_run(self) -> list[TaskRunRow]:
        return [TaskRunRow.from_mapping(r) for r in self._tx.run("select_every_task_run")]

    def ready_task_runs(self, limit: int) -> list[TaskRunRow]:
        rows = self._tx.run("select_ready_task_runs", {"limit": limit})
        return [TaskRunRow.from_mapping(r) for r in rows]

    def tasks_leased_by(self, worker_id: str, limit: int) -> list[TaskRunRow]:
        rows = self._tx.run("select_tasks_leased_by", {"worker_id": worker_id, "limit": limit})
        return [TaskRunRow.from_mapping(r) for r in rows]

    def expired_leases(self, limit: int, run_ids: Collection[UUID] | None = None) -> list[UUID]:
        """Running task runs whose lease expired by the database's clock, oldest first
        (only of ``run_ids``, if given)."""
        if run_ids is None:
            return _ids(self._tx.run("select_expired_leases", {"limit": limit}))
        params = {"limit": limit, "run_ids": id_list(run_ids)}
        return _ids(self._tx.run("select_expired_leases_of_runs", params))

    def overdue_tasks(self, limit: int) -> list[OverdueTask]:
        """Running attempts past their execution timeout by the database's clock, the
        most overdue first, each with the fencing token it is failed with."""
        rows = self._tx.run("select_overdue_tasks", {"limit": limit})
        return [OverdueTask(r["id"], r["fencing_token"], r["workflow_run_id"]) for r in rows]

    def woken_runs(self, limit: int) -> list[UUID]:
        """Runs marked as needing an advance, oldest mark first."""
        return _ids(self._tx.run("select_woken_runs", {"limit": limit}))

    def wakeup_count(self) -> int:
        (row,) = self._tx.run("count_run_wakeups")
        return int(row["marks"])

    def runs_with_retries_due(self, limit: int) -> list[UUID]:
        """Runs with a retrying task whose retry is due by the database's clock."""
        return _ids(self._tx.run("select_runs_with_retries_due", {"limit": limit}))

    def runs_due_to_start(self, limit: int) -> list[UUID]:
        """Pending delayed runs whose start time has come by the database's clock."""
        return _ids(self._tx.run("select_runs_due_to_start", {"limit": limit}))

    def seconds_to_next_timer(self) -> float | None:
        """Seconds until the next retry falls due, lease expires, attempt times out or
        delayed run may start (negative: already past), by the database's clock; None
        when there is none of them."""
        (row,) = self._tx.run("select_next_timers")
        timers = [
            t
            for t in (
                row["retry_due_at"],
                row["lease_expires_at"],
                row["deadline_at"],
                row["start_at"],
            )
            if t is not None
        ]
        if not timers:
            return None
        return float((min(timers) - row["db_now"]).total_seconds())

    # --- cron schedules (migration 11) -------------------------------------------------

    def schedule(self, name: str) -> ScheduleRow | None:
        """The live (not deleted) schedule of that name."""
        rows = self._tx.run("select_schedule_by_name", {"name": name})
        return ScheduleRow.from_mapping(rows[0]) if rows else None

    def every_schedule(self) -> list[ScheduleRow]:
        """Every live schedule, by name."""
        return [ScheduleRow.from_mapping(r) for r in self._tx.run("select_schedules")]

    def due_schedules(self, limit: int, as_of: datetime | None = None) -> list[ScheduleRow]:
        """Active schedules whose next fire time has come by the database's clock (or
        ``as_of``), the most overdue first."""
        rows = self._tx.run("select_due_schedules", {"limit": limit, "as_of": as_of})
        return [ScheduleRow.from_mapping(r) for r in rows]

    def seconds_to_next_fire(self) -> float | None:
        """Seconds until the next active schedule's fire time (negative: due), by the
        database's clock; None when no schedule is active."""
        (row,) = self._tx.run("select_next_fire")
        if row["next_fire_at"] is None:
            return None
        return float((row["next_fire_at"] - row["db_now"]).total_seconds())

    def dispatches_of(self, task_run_id: UUID) -> list[OutboxRow]:
        rows = self._tx.run("select_outbox_of_task_run", {"task_run_id": task_run_id})
        return [OutboxRow.from_mapping(r) for r in rows]

    def outbox_waiting_of_stalled_types(self, older_than_seconds: float) -> dict[str, int]:
        """Per task type that has a stalled task: its READY tasks whose every dispatch
        is published (each should have a message in the type's queue)."""
        rows = self._tx.run("count_waiting_of_stalled_types", {"older_than": older_than_seconds})
        return {str(r["task_type"]): int(r["waiting"]) for r in rows}

    def pending_dispatch_count(self) -> int:
        (row,) = self._tx.run("count_pending_outbox")
        return int(row["pending"])

    def backlog(self) -> Backlog:
        """The unfinished tasks by state, the pending dispatches and the oldest's age."""
        (outbox,) = self._tx.run("outbox_backlog")
        tasks = self._tx.run("count_unfinished_tasks_by_state")
        oldest = outbox["created_at"]
        age = (outbox["db_now"] - oldest).total_seconds() if oldest is not None else 0.0
        by_state = {state.value: 0 for state in UNFINISHED_TASK_STATES}
        by_state.update((row["state"], int(row["tasks"])) for row in tasks)
        return Backlog(by_state, int(outbox["pending"]), age)

    def task_type_limits(self) -> list[Row]:
        """Every task type's counter row (limits), by name."""
        return self._tx.run("select_task_type_limits")

    def task_type_limit(self, task_type: str) -> Row | None:
        rows = self._tx.run("select_task_type_limit", {"task_type": task_type})
        return rows[0] if rows else None

    def run_limit(self, run_id: UUID) -> Row | None:
        rows = self._tx.run("select_run_limit", {"workflow_run_id": run_id})
        return rows[0] if rows else None

    def held_dispatch(self, task_run_id: UUID) -> Row | None:
        """The hold a limit's refusal of the task's claim left, if any."""
        rows = self._tx.run("select_held_dispatch", {"task_run_id": task_run_id})
        return rows[0] if rows else None

    def schema_version(self) -> int:
        (row,) = self._tx.run("select_schema_version")
        return int(row["version"])

    # --- the feed (projections/feed.py, sql/feed.sql; docs/feed.md) ----------------------

    def feed_page(self, after: feed.Position, limit: int) -> feed.FeedPage:
        return feed.page(self._tx, after, limit)

    def feed_head(self) -> feed.Position:
        return feed.head(self._tx)

    def archive_locations(self) -> list[str]:
        return feed.archive_locations(self._tx)

    def deployment_id(self) -> str:
        """The deployment's id, written once by the migration that created it."""
        (row,) = self._tx.run("select_deployment")
        return str(row["deployment_id"])

    def task_outline(self, run_id: UUID, changed_since: datetime | None = None) -> list[Row]:
        """Each task of a run (changed at or after ``changed_since``, if given) in
        outline: its key, state and attempt."""
        params = {"workflow_run_id": run_id, "as_of": changed_since}
        return self._tx.run("select_task_outline", params)

    def task_runs_first_claimed(
        self, run_id: UUID, at: datetime | None, limit: int
    ) -> list[TaskRunRow]:
        """The ``limit`` tasks of a run claimed first (by ``at``, if given)."""
        params = {"workflow_run_id": run_id, "as_of": at, "limit": limit}
        rows = self._tx.run("select_task_runs_first_claimed", params)
        return [TaskRunRow.from_mapping(r) for r in rows]

    def task_states_as_of(self, run_id: UUID, at: datetime) -> dict[str, str | None]:
        """Each task of a run changed after ``at``: its "state attempt" then, by key
        (``None``: not created yet)."""
        iso = at.astimezone(UTC).isoformat()
        params = {
            "workflow_run_id": run_id,
            "as_of": at,
            "as_of_iso": iso,
            "as_of_bytes": iso.encode(),
            "as_of_length": len(iso),
        }
        return {
            r["task_key"]: r["state_then"]
            for r in self._tx.run("select_task_states_as_of", params)
        }


def stored_event(row: Row) -> StoredEvent:
    """A row of the event log's table as the library's stored event."""
    return StoredEvent(
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def first_row(row_type: type[_R], rows: list[Row]) -> _R | None:
    return row_type.from_mapping(rows[0]) if rows else None


def _ids(rows: list[Row]) -> list[UUID]:
    return [next(iter(row.values())) for row in rows]


def run_of_task_unless_known(
    task_run_id: UUID, known_runs: Collection[UUID]
) -> tuple[str, dict[str, Any]]:
    """The statement reading a task's run unless its id is in ``known_runs`` (a
    worker's few latest runs: their definitions are not sent again)."""
    params = {"id": task_run_id, "known_runs": id_list(known_runs)}
    return "select_run_of_task_unless_known", params


def runs_of_tasks_unless_known(
    task_run_ids: Collection[UUID], known_runs: Collection[UUID]
) -> tuple[str, dict[str, Any]]:
    """The statement reading the runs of a batch's tasks, each once, except those in
    ``known_runs``."""
    params = {
        "task_run_ids": id_list(task_run_ids),
        "known_runs": id_list(known_runs),
    }
    return "select_runs_of_tasks_unless_known", params


def id_list(ids: Collection[UUID]) -> list[str]:
    """Ids as the ``uuid_list`` macro of the SQL files takes them: a JSON array of strings."""
    return [str(each) for each in ids]
