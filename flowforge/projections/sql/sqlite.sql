-- What SQLite (the embedded default) needs that PostgreSQL does not: the macros the
-- shared files use, and the statements that exist only here. Every statement both
-- databases run is in a shared file, one per concept (common.sql, outbox.sql,
-- wakeups.sql, limits.sql, schedules.sql). A "-- macro: <name>" block is the text
-- {name} stands for in them.

-- Microseconds since the epoch by SQLite's clock, the unit every timestamp column
-- stores (julianday is exact to the millisecond). SQLite's 'now' is fixed for one
-- statement, as now() is for one PostgreSQL transaction.
-- macro: now
(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS integer) * 1000)

-- No greatest() here, unlike PostgreSQL. There, now() is read when the transaction
-- starts, which can be before a concurrent writer of the same row commits. Here every
-- write transaction starts with BEGIN IMMEDIATE (SqliteDatabase.transaction in
-- db/sqlite.py), which takes the database's write lock before the first statement, and
-- the clock is read inside the UPDATE itself: the previous writer of the row committed
-- before this one got the lock, so this clock read comes after that one's. Per row, the
-- timestamps follow the versions as long as the machine's clock does not step back;
-- two versions in the same millisecond get equal timestamps, which the audit log
-- orders by version.
-- macro: touched_at
{now}

-- An element's mapped task: its key before the "[" (a task key has none).
-- macro: mapped_task_of_key
substr(task_key, 1, instr(task_key, '[') - 1)

-- macro: seconds
CAST(:param * 1000000 AS integer)

-- SQLite has no uuid, json or timestamp type: uuids and JSON are text, timestamps
-- integer microseconds (flowforge/projections/db/sqlite.py encodes and decodes them).
-- macro: uuid
text

-- macro: json
text

-- macro: timestamp
integer

-- macro: bigint
integer

-- macro: real
real

-- A task row's lease from its run's stored definition (``run``: the run's row): the
-- task's own lease, or else the workflow's (WorkflowDefinition.lease_seconds_for).
-- macro: definition_lease_of_task
coalesce(
    (SELECT json_extract(task.value, '$.lease_seconds')
     FROM json_each(run.definition, '$.tasks') AS task
     WHERE json_extract(task.value, '$.key') = task_runs.task_key),
    json_extract(run.definition, '$.lease_seconds'))

-- No row locks in SQLite: BEGIN IMMEDIATE already holds the whole database's write lock
-- for the transaction, so one advance of a run at a time and one publisher sweep at a
-- time follow from it.
-- macro: for_update


-- macro: for_update_skip_locked


-- Without it, SQLite answers the safety net's DISTINCT with a walk of the whole
-- (workflow_run_id, task_key) index, every task ever run, on every scheduler pass
-- (tests/integration/projections/test_plans.py).
-- macro: indexed_by_retry_due
INDEXED BY task_runs_retry_due_idx

-- A single writer holds the whole database: nothing to note.
-- macro: note_run_held


-- A new outbox row's dispatch id: 32 random hex digits (uuids are stored as hex here).
-- macro: random_uuid
lower(hex(randomblob(16)))

-- A single writer: a row this transaction's statements just matched was written here.
-- macro: written_by_this_transaction
1 = 1

-- A new deployment's id (flowforge_deployment): 12 random hex digits.
-- macro: random_deployment_id
lower(hex(randomblob(6)))

-- A list given as one JSON array (:param), as rows; uuids are text here.
-- macro: uuid_list
SELECT value FROM json_each(:param)

-- macro: text_list
SELECT value FROM json_each(:param)

-- An INTEGER PRIMARY KEY is the rowid: issued in insertion order.
-- macro: serial_primary_key
integer PRIMARY KEY

-- No NOTIFY or LISTEN: never run (SqliteDatabase.notifier() does nothing; the embedded mode
-- runs every loop in one process, woken by the store's in-process bells). Here so both
-- dialects name the same statements.
-- name: notify_begin
SELECT 1;

-- name: notify_commit
SELECT 1;

-- name: notify_run_wakeups
SELECT 1;

-- name: notify_outbox
SELECT 1;

-- name: listen_run_wakeups
SELECT 1;

-- name: listen_outbox
SELECT 1;

-- The write lock (BEGIN IMMEDIATE) already serialises schema creation.
-- name: lock_schema
SELECT 1;

-- The write lock already keeps writers out during a rebuild.
-- name: lock_projected_runs
SELECT 1;

-- name: limit_rebuild_lock_wait
SELECT 1;

-- name: lock_projected_tasks
SELECT 1;

-- The schedules too (migration 11): a schedule's pause or resume writes no other table.
-- name: lock_projected_schedules
SELECT 1;

-- The write lock already serialises a claim and a change of a limit.
-- name: lock_task_runs_for_claim
SELECT 1;

-- name: lock_task_runs_for_limit
SELECT 1;

-- name: limit_change_lock_wait
SELECT 1;

-- Whether the schema was ever created, asked without creating anything (the catalog).
-- name: schema_table_exists
SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = 'flowforge_schema';

-- SQLite's transition events are built in Python (no data-modifying CTE): no function.
-- macro: create_event_json_function
SELECT 1

-- The metrics' unfinished tasks by state, through the unfinished tasks' partial index:
-- SQLite, without statistics, would scan the whole table to group them.
-- name: count_unfinished_tasks_by_state
SELECT state, count(*) AS tasks FROM task_runs INDEXED BY task_runs_unfinished_idx
WHERE state IN ({unfinished_task_states}) GROUP BY state;

-- The database's size on disk (`flowforge db stats`).
-- name: stats_database_bytes
SELECT page_count * page_size AS bytes FROM pragma_page_count(), pragma_page_size();

-- --- the feed (feed.sql; docs/feed.md) ----------------------------------------------------
-- One writer at a time (BEGIN IMMEDIATE): a transaction's rowids are issued after every
-- committed one's and before any later one's, so the rowid order is the commit order and
-- the feed needs no transaction id (every position's transaction part is 0) and no
-- horizon (every committed event may be read).
-- macro: record_feed_transactions
SELECT 1

-- macro: feed_transaction
0

-- The library keeps the originator id as 32 hex digits; task_runs' id is the dashed form.
-- macro: feed_task_run_id
(substr(e.originator_id, 1, 8) || '-' || substr(e.originator_id, 9, 4) || '-'
 || substr(e.originator_id, 13, 4) || '-' || substr(e.originator_id, 17, 4) || '-'
 || substr(e.originator_id, 21))

-- Conditions on the rowid, always true, so that the reads SEARCH the table by its key
-- (EXPLAIN QUERY PLAN; tests/integration/projections/test_plans.py).
-- macro: feed_below_horizon
e.rowid <= 9223372036854775807

-- macro: feed_from_start
e.rowid >= 0

-- macro: feed_order
e.rowid

-- macro: feed_order_desc
e.rowid DESC

-- macro: feed_after
e.rowid > :notification_id

-- The id of the task an event of the log belongs to (reading.sql), in task_runs.id's
-- form: the log keeps 32 hex digits, task_runs the hyphenated text.
-- macro: task_id_of_event
(substr(e.originator_id, 1, 8) || '-' || substr(e.originator_id, 9, 4) || '-' ||
 substr(e.originator_id, 13, 4) || '-' || substr(e.originator_id, 17, 4) || '-' ||
 substr(e.originator_id, 21))

-- A run's definition without its tasks (reading.sql).
-- macro: definition_without_tasks
json_remove(definition, '$.tasks')

-- macro: definition_brief_of_parameter
json_remove(:definition, '$.tasks')

-- macro: actor_of_event
json_extract(CAST(state AS TEXT), '$.actor')

-- The redispatch net's pass (postgres.sql): a write transaction here is already the only
-- one (BEGIN IMMEDIATE), so the pass always has the net to itself.
-- name: try_redispatch_net
SELECT 1 AS taken;

-- An event at or before :as_of (reading.sql, select_task_states_as_of): its time's ISO
-- text compared with :as_of_iso's (both UTC, "+00:00": the transcoder writes the
-- database's UTC clock; ISO times in one zone sort as their text).
-- macro: event_at_or_before
json_extract(CAST(e.state AS TEXT), '$.timestamp._data_') <= :as_of_iso

-- macro: event_id_of_task
replace(t.id, '-', '')

-- An event's state and attempt ("state attempt"; a creation has no attempt: 1).
-- macro: state_and_attempt_of_event
json_extract(CAST(e.state AS TEXT), '$.state') || ' '
    || coalesce(json_extract(CAST(e.state AS TEXT), '$.attempt'), 1)
