"""The projected tables' rows as typed values, and each column's kind.

Both backends return rows as these dataclasses with the same Python types (``UUID``,
aware ``datetime``, decoded JSON), so nothing above ``projections`` knows which
database it runs on. A column's kind is declared once, here, by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Self
from uuid import UUID

from flowforge.aggregates import cron_schedule, task_run, workflow_run
from flowforge.aggregates.states import TaskRunState, WorkflowRunState


class ColumnCodec(Enum):
    UUID = "uuid"
    TIMESTAMP = "timestamp"
    JSON = "json"
    #: The event store's originator id: the library stores it as hex on SQLite.
    ORIGINATOR_ID = "originator_id"
    #: A JSON list of originator ids (``{uuid_list[...]}``): hex on SQLite too.
    ORIGINATOR_ID_LIST = "originator_id_list"


COLUMN_CODECS: Mapping[str, ColumnCodec] = {
    "id": ColumnCodec.UUID,
    "workflow_run_id": ColumnCodec.UUID,
    "task_run_id": ColumnCodec.UUID,
    "rerun_of": ColumnCodec.UUID,
    "carried_from_run_id": ColumnCodec.UUID,
    "carried_from_task_run_id": ColumnCodec.UUID,
    "dispatch_id": ColumnCodec.UUID,
    "originator_id": ColumnCodec.ORIGINATOR_ID,
    "definition": ColumnCodec.JSON,
    "inputs": ColumnCodec.JSON,
    "trace_context": ColumnCodec.JSON,
    "depends_on": ColumnCodec.JSON,
    "result": ColumnCodec.JSON,
    "map_item": ColumnCodec.JSON,
    "error": ColumnCodec.JSON,
    "task_types": ColumnCodec.JSON,
    "task_keys": ColumnCodec.JSON,
    "known_runs": ColumnCodec.JSON,
    "task_run_ids": ColumnCodec.JSON,
    "originator_ids": ColumnCodec.ORIGINATOR_ID_LIST,
    "dispatch_ids": ColumnCodec.JSON,
    "run_ids": ColumnCodec.JSON,
    "idempotency_keys": ColumnCodec.JSON,
    "lease_expires_at": ColumnCodec.TIMESTAMP,
    "deadline_at": ColumnCodec.TIMESTAMP,
    "started_at": ColumnCodec.TIMESTAMP,
    "finished_at": ColumnCodec.TIMESTAMP,
    "retry_due_at": ColumnCodec.TIMESTAMP,
    "start_at": ColumnCodec.TIMESTAMP,
    "created_at": ColumnCodec.TIMESTAMP,
    "updated_at": ColumnCodec.TIMESTAMP,
    "published_at": ColumnCodec.TIMESTAMP,
    "db_now": ColumnCodec.TIMESTAMP,
    "applied_at": ColumnCodec.TIMESTAMP,
    "marked_at": ColumnCodec.TIMESTAMP,
    # The schedules (migration 11).
    "last_run_id": ColumnCodec.UUID,
    "next_fire_at": ColumnCodec.TIMESTAMP,
    "last_fire_at": ColumnCodec.TIMESTAMP,
    "due_at": ColumnCodec.TIMESTAMP,
    "as_of": ColumnCodec.TIMESTAMP,
    "changed_at": ColumnCodec.TIMESTAMP,
    "held_at": ColumnCodec.TIMESTAMP,
    # The archived runs (migration 15).
    "archived_at": ColumnCodec.TIMESTAMP,
    "archived_run_id": ColumnCodec.UUID,
    # The attempt logs (migration 19).
    "written_at": ColumnCodec.TIMESTAMP,
}


#: The columns every projected row has besides its aggregate's fields.
ROW_KEYS: tuple[str, ...] = ("id",)
ROW_BOOKKEEPING: tuple[str, ...] = ("version", "created_at", "updated_at")


def row_columns(static: tuple[str, ...], mutable: tuple[str, ...]) -> tuple[str, ...]:
    """A projected table's columns, in order, from its aggregate's field declaration."""
    return (*ROW_KEYS, *static, *mutable, *ROW_BOOKKEEPING)


#: Each table's columns, derived from the aggregates' ``STATIC_FIELDS`` and
#: ``MUTABLE_FIELDS``: the one place a column is declared.
TASK_RUN_COLUMNS = row_columns(task_run.STATIC_FIELDS, task_run.MUTABLE_FIELDS)
WORKFLOW_RUN_COLUMNS = row_columns(workflow_run.STATIC_FIELDS, workflow_run.MUTABLE_FIELDS)
SCHEDULE_COLUMNS = row_columns(cron_schedule.STATIC_FIELDS, cron_schedule.MUTABLE_FIELDS)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(row_type: type) -> tuple[str, ...]:
    # Every row read asks: dataclasses.fields builds its tuple anew on each call.
    names = _FIELD_NAMES.get(row_type)
    if names is None:
        names = _FIELD_NAMES[row_type] = tuple(f.name for f in dataclasses.fields(row_type))
    return names


class _Row:
    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> Self:
        return cls(**{name: row[name] for name in _field_names(cls)})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    def values(self) -> dict[str, Any]:
        """The row's columns by name, without ``as_dict``'s deep copy."""
        return {name: getattr(self, name) for name in _field_names(type(self))}


def check_columns(row_type: type[_Row], columns: tuple[str, ...]) -> None:
    """Refuse (at import) a row type whose fields are not the declared columns.

    The row types are typed dataclasses so mypy can check every use; their field
    NAMES come from the aggregate's declaration, and this check keeps the two equal:
    a column added to the aggregate and not to the row (or the reverse) fails at import.
    """
    names = tuple(f.name for f in dataclasses.fields(row_type))  # type: ignore[arg-type]
    if set(names) != set(columns):
        missing, extra = set(columns) - set(names), set(names) - set(columns)
        raise TypeError(
            f"{row_type.__name__} does not match its aggregate's fields: "
            f"missing {sorted(missing)}, not declared {sorted(extra)}"
        )


@dataclass(frozen=True, slots=True)
class TaskRunRow(_Row):
    id: UUID
    workflow_run_id: UUID
    task_key: str
    task_type: str
    depends_on: list[str]
    max_attempts: int
    lease_seconds: float | None
    timeout_seconds: float | None
    max_running: int | None
    max_worker_losses: int | None
    map_index: int | None
    map_item: Any
    state: str
    fencing_token: int
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    deadline_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    retry_due_at: datetime | None
    result: Any
    error: dict[str, str] | None
    carried_from_run_id: UUID | None
    carried_from_task_run_id: UUID | None
    carried_from_attempt: int | None
    worker_losses: int
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def task_state(self) -> TaskRunState:
        return TaskRunState(self.state)


@dataclass(frozen=True, slots=True)
class WorkflowRunRow(_Row):
    id: UUID
    workflow_name: str
    definition: dict[str, Any]
    inputs: dict[str, Any]
    idempotency_key: str | None
    rerun_of: UUID | None
    start_at: datetime | None
    trace_context: dict[str, str] | None
    state: str
    started_at: datetime | None
    finished_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def run_state(self) -> WorkflowRunState:
        return WorkflowRunState(self.state)


@dataclass(frozen=True, slots=True)
class ScheduleRow(_Row):
    id: UUID
    name: str
    cron: str
    timezone: str
    workflow_name: str
    definition: dict[str, Any]
    inputs: dict[str, Any]
    catch_up: int
    state: str
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_run_id: UUID | None
    version: int
    created_at: datetime
    updated_at: datetime


check_columns(TaskRunRow, TASK_RUN_COLUMNS)
check_columns(WorkflowRunRow, WORKFLOW_RUN_COLUMNS)
check_columns(ScheduleRow, SCHEDULE_COLUMNS)


@dataclass(frozen=True, slots=True)
class OutboxRow(_Row):
    dispatch_id: UUID
    task_run_id: UUID
    task_key: str
    task_type: str
    fencing_token: int
    created_at: datetime
    published_at: datetime | None
    #: Why the redispatch net wrote it (``app/redispatch.py``); None on a transition's.
    reason: str | None


@dataclass(frozen=True, slots=True)
class PendingOutboxRow(OutboxRow):
    """A pending outbox row as a sweep publishes it: with its run's trace context."""

    trace_context: dict[str, str] | None
