"""Every statement FlowForge runs finds its rows through an index, on a database with a
long history: the cost of a claim, a finish, a sweep, a scheduler pass does not grow with
the rows finished before it.

Real PostgreSQL. The tables hold a few live runs beside thousands of finished ones
(cloned in SQL from a real finished run, then analyzed), the shape of a production
database. Each statement is prepared as FlowForge prepares it
(``pipeline._templates``) and explained twice: its generic plan, which a long-lived
session keeps after five executions when it costs no more than the custom ones, and
its custom plan for typical values, which the first executions use (and every one,
where it is cheaper). A whole-table scan of a big table is allowed only to the
statements named in ``WHOLE_TABLE``, each for a reason.

SQLite plans without statistics (FlowForge never analyzes it), so its plans are read on
an empty database with ``EXPLAIN QUERY PLAN``: a ``SCAN`` of a big table is allowed only
through an index that holds live rows only, or read in order with no filter up to a
LIMIT.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest

from flowforge.app.service import FlowForge
from flowforge.projections import statements
from flowforge.projections.db.pipeline import _templates

#: The tables that grow with every run.
BIG_TABLES = ("task_runs", "workflow_runs", "dispatch_outbox", "flowforge_events")
#: Finished runs cloned beside the live ones: a few thousand, where a whole-table scan
#: first looks cheaper to the planner than a hundred index lookups (what it assumes a
#: set-returning function gives), and a production-sized history.
HISTORIES = (3_000, 30_000)
#: Statements that read or write a whole table by design.
WHOLE_TABLE = {
    "delete_task_runs": "the rebuild empties the table",
    "delete_workflow_runs": "the rebuild empties the table",
    "fill_missing_task_leases": "a migration and a rebuild fill every older row",
    "select_every_run": "the rebuild's verification reads every run",
    "select_every_task_run": "the rebuild's verification reads every task run",
    "insert_task_type_limit_counters": "the rebuild makes a counter for every type a "
    "task's own max_running limits",
    "stats_counts": "`db stats` counts every table's rows",
    "archive_candidates": "when every run ended before the cutoff (this history's), "
    "all are candidates and a whole read is the planner's best; the LIMIT bounds the answer",
}
_SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")
#: Statements on a table FlowForge's schema does not create: not explained here.
OTHER_TABLES: dict[str, str] = {}

ONE_TASK = {"name": "plans_one", "tasks": [{"key": "only", "type": "noop"}]}
FAN_OUT = {
    "name": "plans_fan",
    "tasks": [
        {"key": "a", "type": "noop"},
        {"key": "b", "type": "noop", "depends_on": ["a"]},
        {"key": "c", "type": "noop", "depends_on": ["a"]},
    ],
}

_CLONE = """
CREATE TEMP TABLE copies AS SELECT gen_random_uuid() AS run_id, gen_random_uuid() AS task_id,
    gen_random_uuid() AS dispatch_id FROM generate_series(1, %(n)s);
INSERT INTO workflow_runs
SELECT r.* FROM workflow_runs w, copies c, jsonb_populate_record(NULL::workflow_runs,
    to_jsonb(w) || jsonb_build_object('id', c.run_id, 'idempotency_key', NULL)) AS r
WHERE w.id = %(run)s;
INSERT INTO task_runs
SELECT r.* FROM task_runs t, copies c, jsonb_populate_record(NULL::task_runs,
    to_jsonb(t) || jsonb_build_object('id', c.task_id, 'workflow_run_id', c.run_id)) AS r
WHERE t.workflow_run_id = %(run)s;
INSERT INTO dispatch_outbox
SELECT r.* FROM dispatch_outbox o, task_runs t, copies c,
    jsonb_populate_record(NULL::dispatch_outbox,
    to_jsonb(o) || jsonb_build_object('dispatch_id', c.dispatch_id, 'task_run_id', c.task_id,
        'published_at', now())) AS r
WHERE o.task_run_id = t.id AND t.workflow_run_id = %(run)s;
INSERT INTO flowforge_events (originator_id, originator_version, topic, state)
SELECT c.run_id, e.originator_version, e.topic, e.state
FROM flowforge_events e, copies c WHERE e.originator_id = %(run)s;
"""


@pytest.fixture(params=HISTORIES, ids=lambda n: f"{n}_finished_runs")
def long_history(
    pg_app: FlowForge, postgres_url: str, request: pytest.FixtureRequest
) -> Iterator[psycopg.Connection]:
    """Live runs in early states beside that many finished ones; a connection on it."""
    finished = pg_app.start_workflow_run(ONE_TASK)
    (task,) = pg_app.task_runs(finished)
    claim = pg_app.claim_task_run(task.id, "plans", 30)
    assert claim is not None
    assert pg_app.finish_task_run(task.id, claim.fencing_token, "succeed", None)
    pg_app.schedule_once()
    assert pg_app.get_workflow_run(finished).state == "succeeded"
    pg_app.start_workflow_run(ONE_TASK)
    pg_app.start_workflow_run(FAN_OUT)
    # Nothing prepared by psycopg itself: the test prepares and deallocates by hand.
    with psycopg.connect(postgres_url, autocommit=True, prepare_threshold=None) as conn:
        with conn.transaction():
            for statement in _CLONE.split(";\n")[:-1]:
                conn.execute(statement, {"n": request.param, "run": finished})
        conn.execute("ANALYZE")
        yield conn


def _plans(conn: psycopg.Connection, name: str) -> list[str]:
    """The statement's plans as FlowForge prepares it: the generic one and a custom one
    for typical values (the first five executions are custom, and PostgreSQL keeps
    custom plans where they cost less); none if it is never prepared (DDL, LOCK and
    NOTIFY go inline)."""
    template = _templates()[name]
    if template.prepare is None:
        return []
    conn.execute(f"DEALLOCATE ALL; {template.prepare.decode()}")
    types = conn.execute(
        "SELECT CAST(parameter_types AS text[]) FROM pg_prepared_statements WHERE name = %s",
        (f"flowforge_{name}",),
    ).fetchone()
    assert types is not None
    values = ", ".join(
        _typical(param, type_) for param, type_ in zip(template.order, types[0], strict=True)
    )
    assert template.name is not None
    execute = f"EXECUTE {template.name.decode()}" + (f"({values})" if template.order else "")
    plans = []
    for mode in ("force_generic_plan", "force_custom_plan"):
        conn.execute(f"SET plan_cache_mode = {mode}")
        plans.append("\n".join(row[0] for row in conn.execute(f"EXPLAIN {execute}").fetchall()))
    return plans


def _typical(param: str, type_: str) -> str:
    """A value like the ones FlowForge sends for ``param``, as a literal of ``type_``."""
    if type_.endswith("[]"):  # a mapped task's elements (insert_mapped_elements): none
        return "'{}'"
    if type_ == "json":
        if param in ("task_types", "task_keys"):
            return "'[\"noop\"]'"
        if param.endswith("_ids") or param == "known_runs":  # a batch of ids
            return "'" + json.dumps([str(uuid4()) for _ in range(10)]) + "'"
        return "'{}'"
    return {
        "uuid": f"'{uuid4()}'",
        "text": "'running'" if param in ("source", "target", "state") else "'x'",
        "timestamp with time zone": "now()",
        "boolean": "true",
        "bytea": "'\\x7b7d'",
    }.get(type_, "1")


def test_no_prepared_statement_scans_a_big_table_whole(long_history: psycopg.Connection) -> None:
    scans: dict[str, set[str]] = {}
    for name in sorted(set(_templates()) - set(OTHER_TABLES)):
        plans = _plans(long_history, name)
        if plans:
            scans[name] = {t for plan in plans for t in _SEQ_SCAN.findall(plan) if t in BIG_TABLES}
    assert len(scans) > 50  # every statement was looked at, not none
    unexpected = {name: t for name, t in scans.items() if t and name not in WHOLE_TABLE}
    assert unexpected == {}, f"statements that scan a big table whole: {unexpected}"
    # The allowance is kept honest: a statement named there that no longer scans a table
    # whole (or no longer exists) is taken off the list.
    assert {name for name in WHOLE_TABLE if scans.get(name)} == set(WHOLE_TABLE)


#: SQLite's event table is the library's own.
SQLITE_BIG_TABLES = ("task_runs", "workflow_runs", "dispatch_outbox", "stored_events")
SQLITE_WHOLE_TABLE = {
    "fill_missing_task_leases": WHOLE_TABLE["fill_missing_task_leases"],
    "select_every_run": WHOLE_TABLE["select_every_run"],
    "select_every_task_run": WHOLE_TABLE["select_every_task_run"],
    "select_stored_events": "the rebuild replays every event",
    "stats_counts": WHOLE_TABLE["stats_counts"],
    "insert_task_type_limit_counters": WHOLE_TABLE["insert_task_type_limit_counters"],
    "recount_task_type_limits": "the rebuild recounts every type's running tasks",
    "change_task_type_limit": "an operator's change of a limit counts its type's running "
    "tasks (rare, on no loop; SQLite cannot see that state = 'running' implies the "
    "leases' index's predicate)",
    "ensure_task_type_counter": "the first run that limits a type counts its running "
    "tasks, once per type",
    "select_ready_task_runs": "a listing a user asks for, on no loop (SQLite cannot see "
    "that state = 'ready' implies the unfinished-tasks index's predicate)",
}
#: An index a SCAN may walk whole: it holds live rows only.
LIVE_ROWS_INDEXES = ("dispatch_outbox_pending_idx", "task_runs_unfinished_idx")
#: Statements that walk an index in order with no filter, stopping at their LIMIT.
ORDERED_READS = ("select_recent_runs", "select_recent_run_ids")
_SQLITE_SCAN = re.compile(r"^SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")


def test_no_sqlite_statement_scans_a_big_table_whole(tmp_path: Path) -> None:
    location = tmp_path / "plans.db"
    FlowForge(f"sqlite:///{location}").close()
    scans: dict[str, set[str]] = {}
    with sqlite3.connect(location) as conn:
        for name, sql in sorted(statements.load("sqlite").items()):
            if sql.lstrip().upper().startswith(("CREATE", "ALTER", "DROP", "BEGIN")):
                continue
            if name in OTHER_TABLES:
                continue
            params = dict.fromkeys(statements._PARAMETER.findall(sql))
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            scans[name] = {
                match[1]
                for line in plan
                if (match := _SQLITE_SCAN.match(line))
                and match[1] in SQLITE_BIG_TABLES
                and not (match[2] and (match[2] in LIVE_ROWS_INDEXES or name in ORDERED_READS))
            }
    assert len(scans) > 50
    unexpected = {name: t for name, t in scans.items() if t and name not in SQLITE_WHOLE_TABLE}
    assert unexpected == {}, f"statements that scan a big table whole: {unexpected}"
    assert {name for name in SQLITE_WHOLE_TABLE if scans.get(name)} == set(SQLITE_WHOLE_TABLE)
