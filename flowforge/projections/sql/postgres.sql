-- What PostgreSQL needs that SQLite does not: the macros the shared files use, and the
-- statements that exist only here. Every statement both databases run is in a shared
-- file, one per concept (common.sql, outbox.sql, wakeups.sql, limits.sql,
-- schedules.sql). A "-- macro: <name>" block is the text {name} stands for in them.

-- now() is the transaction's start time: one clock (the database's) for every lease,
-- retry due time and event timestamp.
-- macro: now
now()

-- An element's mapped task: its key before the "[" (a task key has none).
-- macro: mapped_task_of_key
split_part(task_key, '[', 1)

-- now() is the transaction's START: a writer that waited for another's row lock can
-- have started before it and commit after it, so now() alone could set a row's
-- updated_at (the event's timestamp) earlier than the version before it.
-- greatest(now(), updated_at) keeps each row's event timestamps in version order, so a
-- task's audit log in time order is its order.
-- macro: touched_at
greatest(now(), updated_at)

-- macro: seconds
:param * interval '1 second'

-- Native types. JSON columns are json, not jsonb: json keeps the document as written
-- (1e+16 stays a float, "\u0000" is allowed), and FlowForge never queries inside it.
-- macro: uuid
uuid

-- macro: json
json

-- macro: timestamp
timestamptz

-- macro: bigint
bigint

-- macro: real
double precision

-- A task row's lease from its run's stored definition (``run``: the run's row): the
-- task's own lease, or else the workflow's (WorkflowDefinition.lease_seconds_for).
-- macro: definition_lease_of_task
coalesce(
    (SELECT (task ->> 'lease_seconds')::double precision
     FROM json_array_elements(run.definition -> 'tasks') AS task
     WHERE task ->> 'key' = task_runs.task_key),
    (run.definition ->> 'lease_seconds')::double precision)

-- Row locks: the run row that serialises one run's advance, and the outbox rows that
-- parallel publishers divide (a row another publisher holds is skipped, not waited for).
-- macro: for_update
FOR UPDATE

-- macro: for_update_skip_locked
FOR UPDATE SKIP LOCKED

-- The planner finds the retries due through their index unaided.
-- macro: indexed_by_retry_due


-- Whether the row in scope was written by this transaction (its version's xmin is this
-- transaction's id; txid_current_if_assigned rather than pg_current_xact_id, which needs
-- PostgreSQL 13). A FOR UPDATE lock does not change xmin: only a write does.
-- macro: written_by_this_transaction
xmin::text::bigint = mod(txid_current_if_assigned(), 4294967296)

-- A new outbox row's dispatch id (a released hold's: limits.sql): random, as
-- md5 of random() rather than gen_random_uuid(), which needs PostgreSQL 13.
-- macro: random_uuid
CAST(md5(random()::text || clock_timestamp()::text) AS uuid)

-- A new deployment's id (flowforge_deployment): 12 random hex digits. md5 of random()
-- rather than gen_random_uuid(), which needs PostgreSQL 13.
-- macro: random_deployment_id
substr(md5(random()::text || clock_timestamp()::text), 1, 12)

-- A list given as one JSON array (:param; JSON parameters are sent as json, FlowForge's
-- JSON column type here), as rows: a batch's task runs, the runs a worker knows, a
-- sweep's dispatches; a run's task keys, a runner's task types. Unnested from an array,
-- not straight from json_array_elements_text: the planner takes a set-returning
-- function for 100 rows but an unnested array for 10. With 100, a claim's read of its
-- task's run scanned task_runs and workflow_runs whole in a database of a few thousand
-- runs (every claim paid for every run before it), and the
-- publisher's mark of a sweep scanned the outbox
-- (tests/integration/projections/test_plans.py).
-- macro: uuid_list
SELECT unnest(CAST(ARRAY(SELECT json_array_elements_text(:param)) AS uuid[]))

-- macro: text_list
SELECT unnest(CAST(ARRAY(SELECT json_array_elements_text(:param)) AS text[]))

-- A row number issued in insertion order (the run wake-ups' key).
-- macro: serial_primary_key
bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY

-- Wake-ups across processes: after a commit that marked a run or added an outbox row,
-- the process's notifier sends NOTIFY on a connection of its own (wakeups.py). Not in
-- the writing transaction: a NOTIFY holds a cluster-wide lock from before its commit
-- until the commit is flushed, so notifying commits cannot share a WAL flush, while
-- NOTIFYs from a connection of their own leave the writers' commits alone
-- (docs/performance.md, "Design choices that buy the speed": "The notifier").
-- The notifier's transaction commits asynchronously: a notification is a hint, the rows
-- are the truth, and it need not wait for a flush of nothing. SET LOCAL, never a session
-- SET: through PgBouncer's transaction pooling a session setting would stay on a server
-- connection that other clients' transactions then use, and make their commits
-- asynchronous too.
-- name: notify_begin
BEGIN; SET LOCAL synchronous_commit = off;

-- name: notify_commit
COMMIT;

-- name: notify_run_wakeups
NOTIFY {run_wakeups_channel};

-- name: notify_outbox
NOTIFY {outbox_channel};

-- name: listen_run_wakeups
LISTEN {run_wakeups_channel};

-- name: listen_outbox
LISTEN {outbox_channel};

-- Processes starting at once would otherwise race to create the schema.
-- name: lock_schema
SELECT pg_advisory_xact_lock(7354219860);

-- The rebuild: writers wait while the rows are deleted and rebuilt from the log. It
-- takes workflow_runs first, waiting as long as it takes (it holds nothing yet).
-- name: lock_projected_runs
LOCK TABLE workflow_runs IN EXCLUSIVE MODE;

-- Then task_runs, waiting at most 100 ms: a write may hold task_runs and wait for
-- workflow_runs (a claim starting its run), and one of the two must give way. Below
-- PostgreSQL's deadlock_timeout (1 s by default), so it is the rebuild, which tries
-- again (app/rebuild.py), not the write. Nothing after it waits for a lock: every
-- writer is kept out.
-- name: limit_rebuild_lock_wait
SELECT set_config('lock_timeout', '100ms', true) AS lock_timeout;

-- name: lock_projected_tasks
LOCK TABLE task_runs IN EXCLUSIVE MODE;

-- The schedules too (migration 11): a schedule's pause or resume writes no other table.
-- name: lock_projected_schedules
LOCK TABLE schedules IN EXCLUSIVE MODE;

-- Whether the schema was ever created, asked without creating anything (the catalog).
-- name: schema_table_exists
SELECT 1 AS present WHERE to_regclass('flowforge_schema') IS NOT NULL;

-- A transition event's user JSON (a result, an error) escaped as the transcoder
-- (UserSafeJSONTranscoder, flowforge/projections/event_log.py) escapes it when the event
-- is built in Python: an object with exactly the library's two reserved keys becomes
-- {"_type_": "flowforge_dict", "_data_": [[key, value], ...]}, innermost first, so the
-- library reads the user's object back as it was. The events a transition's statement
-- stores (projections/event_sql.py) call it. Recursive: its
-- body names itself, which PostgreSQL could not check before the function exists.
-- macro: create_event_json_function
SET LOCAL check_function_bodies = off;
CREATE OR REPLACE FUNCTION flowforge_event_json(value json) RETURNS json
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE json_typeof(value)
    WHEN 'array' THEN (
        SELECT coalesce(json_agg(flowforge_event_json(item) ORDER BY n), json_build_array())
        FROM json_array_elements(value) WITH ORDINALITY AS a (item, n))
    WHEN 'object' THEN (
        SELECT CASE
            WHEN count(*) = 2 AND count(DISTINCT key) = 2
                AND bool_and(key IN ('_type_', '_data_'))
            THEN json_build_object('_type_', 'flowforge_dict', '_data_',
                json_agg(json_build_array(key, flowforge_event_json(item)) ORDER BY n))
            ELSE coalesce(json_object_agg(key, flowforge_event_json(item) ORDER BY n),
                json_build_object())
        END
        FROM json_each(value) WITH ORDINALITY AS o (key, item, n))
    ELSE value
END
$$

-- A creation event whose timestamp is the transaction's clock: the state the mapper
-- encoded around it (projector.TRANSACTION_NOW), with now() written in between as
-- the library's transcoder writes a datetime (the SQL-built transition events'
-- encoding, event_sql.py). One round trip fewer per run created: the clock is not
-- asked first.
-- name: insert_stored_event_at_now
INSERT INTO {events_table} (originator_id, originator_version, topic, state)
VALUES (:originator_id, :originator_version, :topic,
        CAST(:state_head AS bytea) || convert_to(to_json({now})::text, 'UTF8')
            || CAST(:state_tail AS bytea));

-- A worker's success of a task no other task depends on, and all that can follow it,
-- in ONE round trip with the COMMIT (LeafWrites.succeed, projections/writes/leaves.py): the run row tried
-- (try_lock_workflow_run_of_task), the finish (task_finish), then the three statements
-- below. Each acts only if the finish won ({finished_here}) and this transaction has
-- held the run row since its try ({run_row_held}, below; nothing waits for a lock, so
-- the lock order stays the run row first). A run
-- its first claim could not start is started (advance.advance_after_finish says why).
-- :id is the run's id, :task_run_id the finished task's.
-- macro: finished_here
EXISTS (SELECT 1 FROM task_runs WHERE id = :task_run_id AND {written_by_this_transaction})

-- "Held" means held since the batch's try_lock_workflow_run_of_task, which noted the
-- run it locked ({note_run_held}); a batch's later leaf of a run an earlier one locked
-- finds it noted again by its own try (SKIP LOCKED returns a row this transaction
-- holds). Not a SKIP LOCKED re-check: that could take a lock freed since this
-- statement's snapshot, and judge the run with a snapshot older than the lock (two
-- racing last leaves each saw the other unfinished and neither settled nor marked the
-- run: test_leaf_finish.py's race, 1 round in ~4).
-- macro: run_row_held
current_setting('flowforge.held_run', true) = CAST(:id AS text)

-- macro: note_run_held
, set_config('flowforge.held_run', CAST(id AS text), true) AS held_run

-- name: run_start_after_finish
UPDATE workflow_runs
SET state = :target, started_at = {now}, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND {run_row_held} AND {finished_here}
RETURNING *;

-- run_succeed_when_complete's edge, under the same two guards.
-- name: run_succeed_after_finish
UPDATE workflow_runs
SET state = :target, finished_at = {now}, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND {run_row_held} AND {finished_here}
    AND NOT EXISTS (
        SELECT 1 FROM task_runs
        WHERE workflow_run_id = :id AND state IN ({unfinished_task_states})
    )
    AND NOT EXISTS (SELECT 1 FROM task_runs WHERE workflow_run_id = :id AND state = 'cancelled')
RETURNING *;

-- The run's mark for a scheduler, last: written when the finish won, unless this
-- transaction holds the run row and the run is settled (succeeded here, or running with
-- a task still to finish, whose own finish will judge it). So a run whose row another
-- transaction held, a run left neither running nor succeeded, and a run whose tasks
-- are all done but not all succeeded are marked: the same rule as
-- mark_run_wakeup_unless_settled after advance_after_finish's own advance. Its own
-- snapshot: a finish committed after the statements above began is seen here.
-- name: mark_run_wakeup_after_finish
INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
SELECT :id, {now}, :task_key
WHERE {finished_here}
    AND NOT EXISTS (
        SELECT 1 FROM workflow_runs
        WHERE id = :id AND {run_row_held}
            AND (
                (state = :succeeded AND {written_by_this_transaction})
                OR (state = :running AND EXISTS (
                    SELECT 1 FROM task_runs
                    WHERE workflow_run_id = :id AND state IN ({unfinished_task_states})
                ))
            )
    )
RETURNING workflow_run_id;

-- A limited claim's first statement: the lock every write of task_runs takes (ROW
-- EXCLUSIVE), taken before the counter rows' locks, so that an operator's change of a
-- limit (which takes lock_task_runs_for_limit first, then a counter row) cannot
-- deadlock with it. An UPDATE of no row rather than LOCK TABLE, which PostgreSQL
-- refuses in the implicit transaction of a pipeline sent whole (the claim's one round
-- trip); the table lock is taken all the same.
-- name: lock_task_runs_for_claim
UPDATE task_runs SET version = version WHERE false;

-- A new counter row must count every running task of its type: this lock waits for the
-- writes of task_runs in progress (a claim that did not see a counter row) and keeps
-- new ones out until the commit, after which every claim sees the row. Taken only by an
-- operator's change of a limit and by the first submission that limits a type.
-- name: lock_task_runs_for_limit
LOCK TABLE task_runs IN SHARE ROW EXCLUSIVE MODE;

-- An operator's change of a limit waits for that lock at most 100 ms a try: while it
-- waits, every new write of task_runs (a claim, a finish) queues behind it, so an
-- unbounded wait behind one long write would stall them all for as long. Given up, the
-- change wrote nothing and is tried again (app/concurrency_limits.py). Once it holds the
-- lock nothing it does waits for another lock: no writer of task_runs is in progress.
-- name: limit_change_lock_wait
SELECT set_config('lock_timeout', '100ms', true) AS lock_timeout;

-- The slots a task frees when it leaves running, in the statement that moves it
-- (task_finish's and task_reclaim's recorded variants, statements.FREEING_STATEMENTS):
-- its run's counter row, then its type's (the order every writer takes them in: the
-- second reads the first, which PostgreSQL therefore runs to completion before it), each
-- only for a row the UPDATE ``t`` wrote. A task with no limit matches no counter row: no
-- statement of its own. The held task a freed slot dispatches is found by the next
-- statement (release_held_dispatches), whose snapshot sees a hold committed while this
-- one waited for a counter row (docs/scheduling/limits.md).
-- macro: free_slots_of_row
run_freed AS (
    UPDATE run_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
    WHERE workflow_run_id IN (SELECT workflow_run_id FROM t) RETURNING 1),
type_freed AS (
    UPDATE task_type_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
    WHERE task_type IN (SELECT task_type FROM t)
      AND (SELECT count(*) FROM run_freed) >= 0
    RETURNING 1),

-- The metrics' unfinished tasks by state: the planner finds the partial index itself.
-- name: count_unfinished_tasks_by_state
SELECT state, count(*) AS tasks FROM task_runs
WHERE state IN ({unfinished_task_states}) GROUP BY state;

-- What a bulk promotion writes besides its events (task_promote_many's recorded
-- variant, reading its updated rows ``t``): each promoted task's dispatch, as
-- OutboxWrites.enqueue writes it for one (its dispatch id random, as a released hold's),
-- and, when the transaction's edges mark their run (:mark_runs), a mark per task as
-- RunMarks.after_edge writes it.
-- macro: promoted_follow_ups
d AS (INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type,
                                   fencing_token, created_at)
      SELECT {random_uuid}, t.id, t.task_key, t.task_type, t.fencing_token, t.updated_at
      FROM t),
m AS (INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
      SELECT t.workflow_run_id, {now}, t.task_key FROM t WHERE :mark_runs),

-- The archiver's lock (`flowforge db archive`, the scheduler's retention): at most one
-- archiver at a time per database, held by a session of its own for the archive's
-- whole length and freed with it (app/archive.py). Its key is a fixed number.
-- name: try_archiver_lock
SELECT pg_try_advisory_lock(:lock_key) AS taken;

-- The scheduler's redispatch net, one pass at a time per database (app/outbox.py): two
-- schedulers confirming the same lost dispatch on overlapping passes would each give it a
-- new one. Held to the pass's commit; a pass that cannot take it is skipped. A fixed key.
-- name: try_redispatch_net
SELECT pg_try_advisory_xact_lock(7354219861) AS taken;

-- name: archiver_unlock
SELECT pg_advisory_unlock(:lock_key) AS freed;

-- The database's size on disk (`flowforge db stats`).
-- name: stats_database_bytes
SELECT pg_database_size(current_database()) AS bytes;

-- --- the feed (feed.sql; docs/feed.md) ----------------------------------------------------
-- Notification ids are NOT issued in commit order here (appends take no table lock:
-- docs/architecture.md, "Throughput decision"), so the feed orders events by a key each
-- event's row records (migration 16), then by notification id, and reads only keys below
-- the oldest transaction still running. The key is the writing transaction's id, or the
-- key of the aggregate's previous event if that is larger: a transaction that took its id
-- early (an advance locking its run) and wrote a task's next version after another
-- transaction committed the version before it would otherwise sort before that version.
-- Every key is at least its own transaction's id, so no event can commit with a key
-- below a horizon a reader has passed (the proof sketch: docs/feed.md).
-- The previous event is read by the trigger's own statement, which (a VOLATILE function
-- in READ COMMITTED) sees what committed after the insert's statement began: the
-- version before, which its row's lock made the insert wait for.
-- txid_current() and txid_current_snapshot() (64-bit, with the epoch) rather than
-- pg_current_xact_id() and pg_current_snapshot(), which need PostgreSQL 13. The column
-- is added with a constant default (no table rewrite): the events written before it
-- have key 0 and keep their notification order, before every later one.
-- macro: record_feed_transactions
ALTER TABLE {events_table} ADD COLUMN transaction_id bigint NOT NULL DEFAULT 0;
CREATE FUNCTION flowforge_feed_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.originator_version = 1 THEN
        NEW.transaction_id := txid_current();
    ELSE
        NEW.transaction_id := greatest(txid_current(), (
            SELECT p.transaction_id FROM {events_table} p
            WHERE p.originator_id = NEW.originator_id
                AND p.originator_version = NEW.originator_version - 1));
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER {events_table}_feed_key BEFORE INSERT ON {events_table}
    FOR EACH ROW EXECUTE PROCEDURE flowforge_feed_key();
CREATE INDEX {events_table}_feed_idx ON {events_table} (transaction_id, notification_id)

-- macro: feed_transaction
e.transaction_id

-- macro: feed_task_run_id
e.originator_id

-- Below the oldest transaction still running, as the statement's snapshot sees it.
-- macro: feed_below_horizon
e.transaction_id < txid_snapshot_xmin(txid_current_snapshot())

-- macro: feed_from_start
e.transaction_id >= 0

-- macro: feed_order
e.transaction_id, e.notification_id

-- macro: feed_order_desc
e.transaction_id DESC, e.notification_id DESC

-- macro: feed_after
(e.transaction_id, e.notification_id) > (:transaction_id, :notification_id)

-- The id of the task an event of the log belongs to (reading.sql), in task_runs.id's
-- form: the same uuid here.
-- macro: task_id_of_event
e.originator_id

-- A run's definition without its tasks (reading.sql), built by the server: the client
-- neither receives nor decodes the tasks.
-- macro: definition_without_tasks
(definition::jsonb - 'tasks')::json

-- The same, of the definition a run's row is inserted with (insert_workflow_run fills
-- definition_brief with it, so that no read parses the whole definition again).
-- macro: definition_brief_of_parameter
(CAST(:definition AS json)::jsonb - 'tasks')::json

-- The actor an event's state names (reading.sql): the state is the library's JSON, bytes.
-- macro: actor_of_event
convert_from(state, 'UTF8')::json->>'actor'

-- A mapped task's elements (map_over, app/mapped.py), created by its upstream's finish:
-- every element's row, its creation event and its dispatch in ONE statement, where one
-- insert of each per element made a 10,000-element map take 30,000 statements. The
-- events' states are the library's encoding, built by its mapper (:element_states, one per
-- :element_ids, in order); every element shares the fixed fields but its key, index and item.
-- name: insert_mapped_elements
WITH t AS (
    INSERT INTO task_runs (id, workflow_run_id, task_key, task_type, depends_on,
                           max_attempts, lease_seconds, timeout_seconds, max_running,
                           max_worker_losses, map_index, map_item, state, fencing_token,
                           attempt, version, created_at, updated_at)
    SELECT e.id, :workflow_run_id, e.task_key, :task_type, CAST(:element_depends_on AS json),
           :max_attempts, :lease_seconds, :timeout_seconds, :max_running,
           :max_worker_losses, e.map_index, e.map_item, 'ready', 0, 1, 1, :created_at,
           :created_at
    FROM unnest(CAST(:element_ids AS uuid[]), CAST(:element_keys AS text[]),
                CAST(:element_indexes AS integer[]), CAST(:element_items AS json[]))
        AS e (id, task_key, map_index, map_item)
    RETURNING id, task_key, task_type, created_at),
ev AS (
    INSERT INTO {events_table} (originator_id, originator_version, topic, state)
    SELECT s.id, 1, :topic, s.state
    FROM unnest(CAST(:element_ids AS uuid[]), CAST(:element_states AS bytea[])) AS s (id, state))
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
SELECT {random_uuid}, t.id, t.task_key, t.task_type, 0, t.created_at FROM t;

-- The rebuild's rows, folded from the log in memory (projections/folding.py), written
-- a few thousand to a statement: a JSON array of rows, each column parsed as its type.
-- name: rebuild_insert_workflow_runs
INSERT INTO workflow_runs ({workflow_run_row_columns}, definition_brief)
SELECT {workflow_run_row_columns}, (CAST(r.definition AS jsonb) - 'tasks')::json
FROM json_populate_recordset(CAST(NULL AS workflow_runs), CAST(:rows_json AS json)) AS r;

-- name: rebuild_insert_task_runs
INSERT INTO task_runs ({task_run_row_columns})
SELECT {task_run_row_columns}
FROM json_populate_recordset(CAST(NULL AS task_runs), CAST(:rows_json AS json)) AS r;

-- An event at or before :as_of (reading.sql, select_task_states_as_of), by its time in
-- its state's head, where the library's transcoder (compact) and the SQL-built events
-- (spaced) both put the timestamp first. A time written in UTC ('+00:00', this
-- session's and the transcoder's usual zone) is compared as bytes with :as_of_bytes (the
-- moment's ISO text in UTC, its :as_of_length bytes): ISO times in one zone sort as their
-- text, and PostgreSQL's trimmed fractions too ('.23+' before '.230001', '+' and '"'
-- sorting before the digits). Any other is parsed and compared as a time; a state
-- without the head, parsed whole. The prefixes are bytea constants (a convert_to()
-- would run on each row); the text's parse costs twice the byte comparison.
-- macro: event_at_or_before
(CASE WHEN substring(e.state FROM 1 FOR 47)
           = '{{"timestamp":{{"_type_":"datetime_iso","_data_":"'::bytea
       AND position('+00:00"'::bytea IN substring(e.state FROM 48 FOR 40)) > 0
      THEN substring(e.state FROM 48 FOR :as_of_length) <= :as_of_bytes
      WHEN substring(e.state FROM 1 FOR 55)
           = '{{"timestamp" : {{"_type_" : "datetime_iso", "_data_" : "'::bytea
       AND position('+00:00"'::bytea IN substring(e.state FROM 56 FOR 40)) > 0
      THEN substring(e.state FROM 56 FOR :as_of_length) <= :as_of_bytes
      ELSE (convert_from(e.state, 'UTF8')::json->'timestamp'->>'_data_')::timestamptz
           <= :as_of
 END)

-- macro: event_id_of_task
t.id

-- An event's state and attempt ("state attempt"; a creation has no attempt: 1).
-- macro: state_and_attempt_of_event
(SELECT (j->>'state') || ' ' || coalesce(j->>'attempt', '1')
 FROM (SELECT convert_from(e.state, 'UTF8')::json AS j) AS parsed)
