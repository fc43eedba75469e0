"""SQL as data: the ``sql/`` files rendered for one dialect, loaded once per dialect.

``common.sql`` holds the statements both databases run, written once, with macros in
braces, and each concept that stands alone has a file of its own (``outbox.sql``,
``wakeups.sql``, ``limits.sql``, ``schedules.sql``: ``SHARED_FILES``).
``sql/<dialect>.sql`` holds only what differs: the text each macro stands for (``--
macro: <name>`` blocks, each commented with why it differs) and the few statements one
database needs and the other does not (``-- name: <name>``). A name defined twice is
an error at load time, so a statement cannot quietly exist in two versions.

The schema is a file too: ``schema.sql`` (the current schema, the statement ``schema``)
and ``migrations/NNN_<what>.sql`` (the statements ``migration_NNN``), with the same macros.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from flowforge.aggregates import cron_schedule, lost_workers, task_run, workflow_run
from flowforge.aggregates.base import Declaration
from flowforge.aggregates.states import ScheduleState, TaskRunState, WorkflowRunState
from flowforge.projections import event_log, event_sql, tables
from flowforge.projections.migration_files import migration_files

DIALECTS = ("postgres", "sqlite")
#: The statements both databases run, one file per concept (as procrastinate keeps one
#: per manager), loaded in this order after the dialect's file: a macro may use only the
#: ones defined before it.
SHARED_FILES = (
    "common.sql",
    "outbox.sql",
    "wakeups.sql",
    "limits.sql",
    "schedules.sql",
    "archive.sql",
    "attempt_logs.sql",
    "feed.sql",
    "reading.sql",
)

_BLOCK = re.compile(r"^-- (name|macro): (\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{3})_\w+\.sql$")
#: ``:name`` but not ``::type`` (no casts in our SQL; kept safe anyway).
_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


class _Parameterized:
    """A macro that names its parameter: ``{seconds[p]}``, ``{uuid_list[p]}``,
    ``{text_list[p]}`` are the dialect's text with ``:param`` naming ``p``;
    ``{seconds_or_row[p]}`` is the duration falling back to the row's column ``p``;
    ``{seconds_of_row[c]}`` the duration in the row's column ``c`` (NULL stays NULL)."""

    def __init__(self, text: str, *, or_row: bool = False, of_row: bool = False) -> None:
        self._text = text
        self._or_row = or_row
        self._of_row = of_row

    def __getitem__(self, parameter: str) -> str:
        # {seconds_or_row[p]}: the row's column p stands in for a NULL :p.
        value = f"coalesce(:{parameter}, {parameter})" if self._or_row else f":{parameter}"
        return self._text.replace(":param", parameter if self._of_row else value)


#: The dialect macros written with ``:param``, used as ``{name[parameter]}``.
_PARAMETERIZED_MACROS = frozenset({"seconds", "uuid_list", "text_list"})


def _quoted(values: list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _assignments(fields: tuple[str, ...]) -> str:
    return ", ".join(f"{f} = :{f}" for f in fields)


#: The PostgreSQL notification channels a commit wakes (flowforge/projections/wakeups.py).
RUN_WAKEUPS_CHANNEL = "flowforge_run_wakeups"
OUTBOX_CHANNEL = "flowforge_outbox"


#: A task still to finish: every state but succeeded and cancelled (a failed task may
#: yet retry). The order of task_runs_unfinished_idx's predicate, so that a query with
#: this list is seen to imply it and uses the index.
UNFINISHED_TASK_STATES = (
    TaskRunState.PENDING,
    TaskRunState.READY,
    TaskRunState.RUNNING,
    TaskRunState.RETRYING,
    TaskRunState.FAILED,
)


#: The transitions' conditional writes, each with the declaration of the aggregate whose
#: row it writes. On PostgreSQL each also exists as ``<name>_recorded``: the same UPDATE
#: storing its event in the same statement (``event_sql.recorded``). SQLite has no
#: data-modifying CTE: its events are built in Python and inserted after the UPDATE, in
#: the same transaction. (A user's cancel of a run is not here: which event it records
#: depends on the state it left, and its events are built in Python on both.)
RECORDED_STATEMENTS: Mapping[str, Declaration] = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "task_move",
                "task_promote_many",
                "task_claim",
                "task_claim_limited",
                "task_finish",
                "task_time_out",
                "task_renew_lease",
                "task_reclaim",
                "task_reclaim_failing",
                "task_schedule_retry",
                "task_retry_ready",
            ),
            task_run.DECLARATION,
        ),
        **dict.fromkeys(
            (
                "run_move",
                "run_start_after_claim",
                "run_succeed_when_complete",
                # PostgreSQL only: a leaf's success in one round trip (LeafWrites.succeed).
                "run_start_after_finish",
                "run_succeed_after_finish",
            ),
            workflow_run.DECLARATION,
        ),
    }
)
#: Statements only PostgreSQL has (every other one both have, each dialect in its own
#: words): a leaf's success in one round trip relies on row locks and transaction ids
#: that SQLite has not (``LeafWrites.succeed``, which refuses a store without them).
POSTGRES_ONLY_STATEMENTS = frozenset(
    {
        "run_start_after_finish",
        "run_succeed_after_finish",
        "mark_run_wakeup_after_finish",
        "insert_stored_event_at_now",
        # A mapped task's elements in one statement (writes/elements.py): SQLite creates
        # them one by one, as a run's creation does.
        "insert_mapped_elements",
        # The archiver's lock (app/archive.py): SQLite's is a file lock.
        "try_archiver_lock",
        "archiver_unlock",
        # The rebuild's rows in bulk (writes/rebuild.py): SQLite inserts them one by one.
        "rebuild_insert_workflow_runs",
        "rebuild_insert_task_runs",
    }
)
#: The recorded statements whose edges leave ``running``: on PostgreSQL they also free
#: the task's concurrency-limit slots, in the same statement ({free_slots_of_row},
#: postgres.sql; docs/scheduling/limits.md).
FREEING_STATEMENTS = frozenset(
    {"task_finish", "task_time_out", "task_reclaim", "task_reclaim_failing"}
)
#: Recorded statements that write more than their events in the same statement, and
#: return fewer columns: the bulk promotion (``TaskWrites.promote``) writes its tasks'
#: dispatches and marks ({promoted_follow_ups}, postgres.sql) and returns what the
#: advance reads of the new rows, so that no row is decoded per task.
BULK_RECORDED_STATEMENTS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"task_promote_many": ("{promoted_follow_ups}\n", "t.id, t.state, t.version, t.updated_at")}
)
RECORDED_SUFFIX = "_recorded"
_RECORDING_DIALECTS = frozenset({"postgres"})
#: How each driver takes a named parameter, as the replacement of ``:name``: psycopg's
#: ``%(name)s``; sqlite3 reads ``:name`` itself.
_PARAMETER_STYLES: Mapping[str, str] = MappingProxyType({"postgres": r"%(\1)s", "sqlite": r":\1"})


def recorded_name(statement: str) -> str:
    """The name of ``statement``'s variant that stores its event too (PostgreSQL)."""
    return statement + RECORDED_SUFFIX


def code_macros() -> dict[str, str]:
    """The macros filled from the code's one declaration of each thing."""
    macros = {
        "run_wakeups_channel": RUN_WAKEUPS_CHANNEL,
        "outbox_channel": OUTBOX_CHANNEL,
        # The state CHECKs are filled from the enums, so the schema cannot drift from them.
        "task_run_states": _quoted([s.value for s in TaskRunState]),
        "workflow_run_states": _quoted([s.value for s in WorkflowRunState]),
        "schedule_states": _quoted([s.value for s in ScheduleState]),
        # The states task_runs_unfinished_idx covers (schema.sql), in its order.
        "unfinished_task_states": _quoted([s.value for s in UNFINISHED_TASK_STATES]),
        # A task's bound of lost workers when its row has none (task_reclaim).
        "default_max_worker_losses": str(lost_workers.DEFAULT_MAX_WORKER_LOSSES),
        # The column lists an event fills, from the aggregates' field declarations.
        "task_run_assignments": _assignments(task_run.MUTABLE_FIELDS),
        "workflow_run_assignments": _assignments(workflow_run.MUTABLE_FIELDS),
        "schedule_assignments": _assignments(cron_schedule.MUTABLE_FIELDS),
    }
    for name, fields in (
        ("task_run", task_run.STATIC_FIELDS),
        ("workflow_run", workflow_run.STATIC_FIELDS),
        ("schedule", cron_schedule.STATIC_FIELDS),
    ):
        macros[f"{name}_static_columns"] = ", ".join(fields)
        macros[f"{name}_static_values"] = ", ".join(f":{f}" for f in fields)
    # Every column of a row, for a restore from an archive file (archive.sql).
    for name, columns in (
        ("task_run", tables.TASK_RUN_COLUMNS),
        ("workflow_run", tables.WORKFLOW_RUN_COLUMNS),
    ):
        macros[f"{name}_row_columns"] = ", ".join(columns)
        macros[f"{name}_row_values"] = ", ".join(f":{c}" for c in columns)
    # A run's row but its definition (reading.sql reads that apart, without its tasks).
    macros["workflow_run_columns_but_definition"] = ", ".join(
        f.name for f in dataclasses.fields(tables.WorkflowRunRow) if f.name != "definition"
    )
    return macros


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """``(kind, name, body)`` for each block, comments stripped."""
    parts = _BLOCK.split(text)
    return [
        (kind, name, _strip_comments(body))
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)
    ]


def _read(file: str) -> str:
    return resources.files("flowforge.projections").joinpath(f"sql/{file}").read_text()


@cache
def migration_names() -> tuple[str, ...]:
    """``migration_001``, ``migration_002``, ... in order; numbered 1 to N without gaps."""
    names = []
    for number, file in enumerate(migration_files(), start=1):
        match = _MIGRATION_FILE.match(file)
        if match is None or int(match.group(1)) != number:
            raise ValueError(
                f"sql/migrations/{file}: expected {number:03d}_<what>.sql (numbered from "
                f"001, no gaps)"
            )
        names.append(f"migration_{number:03d}")
    return tuple(names)


def _schema_blocks() -> list[tuple[str, str, str]]:
    blocks = [("name", "schema", _strip_comments(_read("schema.sql")))]
    for name, file in zip(migration_names(), migration_files(), strict=True):
        blocks.append(("name", name, _strip_comments(_read(f"migrations/{file}"))))
    return blocks


@cache
def load(dialect: str) -> Mapping[str, str]:
    """The statements of ``dialect`` ("postgres" or "sqlite") by name, fully rendered."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {DIALECTS}")
    macros: dict[str, object] = dict(code_macros())
    # The library's table and its order of insertion (event_log.py: the seam).
    macros["events_table"] = event_log.EVENT_TABLES[dialect]
    macros["event_order"] = event_log.EVENT_ORDERS[dialect]
    raw: dict[str, str] = {}
    dialect_blocks = _blocks(_read(f"{dialect}.sql"))
    shared = [block for file in SHARED_FILES for block in _blocks(_read(file))]
    for kind, name, body in dialect_blocks + shared + _schema_blocks():
        if kind == "macro":
            # A macro may use the ones defined before it ({touched_at} is {now} on SQLite).
            text = body.format_map(macros)
            macros[name] = text
            if name in _PARAMETERIZED_MACROS:
                macros[name] = _Parameterized(text)
            if name == "seconds":
                macros["seconds_or_row"] = _Parameterized(text, or_row=True)
                macros["seconds_of_row"] = _Parameterized(text, of_row=True)
            continue
        if name in raw:
            raise ValueError(f"SQL statement {name!r} is defined twice ({dialect})")
        raw[name] = body
    if dialect in _RECORDING_DIALECTS:
        for name, declaration in RECORDED_STATEMENTS.items():
            update = raw[name].rstrip().rstrip(";")
            also = "{free_slots_of_row}\n" if name in FREEING_STATEMENTS else ""
            bulk_also, returning = BULK_RECORDED_STATEMENTS.get(name, ("", "*"))
            raw[recorded_name(name)] = event_sql.recorded(
                update, declaration, "{events_table}", also + bulk_also, returning
            )
    style = _PARAMETER_STYLES[dialect]
    rendered = {name: _PARAMETER.sub(style, body.format_map(macros)) for name, body in raw.items()}
    return MappingProxyType(rendered)


def statements(block: str) -> list[str]:
    """A multi-statement block split into its statements: at each ``;`` outside a
    ``$$``-quoted function body (the feed's trigger function, migration 16, is PL/pgSQL,
    whose statements end with one); there is no other ``;`` inside our SQL."""
    found, current = [], ""
    for index, part in enumerate(block.split("$$")):
        if index % 2:  # inside $$ ... $$: kept whole
            current += f"$${part}$$"
            continue
        first, *rest = part.split(";")
        current += first
        for piece in rest:  # each ; ends the statement so far
            found.append(current)
            current = piece
    return [s.strip() for s in [*found, current] if s.strip()]


def _strip_comments(body: str) -> str:
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()
