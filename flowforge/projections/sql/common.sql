-- Every statement FlowForge runs, written once for both databases.
-- Blocks are "-- name: <name>"; flowforge.projections.statements loads them once per
-- dialect. Parameters are :name (rendered as %(name)s for psycopg); a parameter named
-- like a column carries that column's value.
-- Macros in braces are filled when the statements are loaded:
--   from the dialect file (postgres.sql / sqlite.sql, "-- macro: <name>" blocks):
--     {now}               the database's clock
--     {touched_at}        the updated_at a conditional write sets
--     {seconds[p]}        the parameter :p, a number of seconds, as a duration
--     {uuid_list[p]} {text_list[p]}  the parameter :p, a JSON array, as rows
--     {seconds_or_row[p]} the same, or the row's column p where :p is NULL
--     {uuid} {json} {timestamp} {bigint} {real}   column types
--     {events_table} {event_order}         the eventsourcing library's table
--     {for_update} {for_update_skip_locked} row locks (PostgreSQL only)
--     {indexed_by_retry_due} the retries' index, named where SQLite would not pick it
--   from the code (flowforge/projections/statements.py):
--     {task_run_states} {workflow_run_states}  the enums, so the CHECKs cannot drift
--     {task_run_assignments} {workflow_run_assignments}  "col = :col, ..." for every
--       column an event carries (the aggregates' MUTABLE_FIELDS)
--     {task_run_static_columns} {task_run_static_values}, and the same for
--       workflow_run: the columns fixed at creation (the aggregates' STATIC_FIELDS)

-- Task rows without the lease their claim takes (created before migration 5, or rebuilt
-- from creation events stored before it) get it from their run's definition.
-- macro: fill_task_leases
UPDATE task_runs SET lease_seconds = (
    SELECT {definition_lease_of_task} FROM workflow_runs AS run
    WHERE run.id = task_runs.workflow_run_id)
WHERE lease_seconds IS NULL

-- name: fill_missing_task_leases
{fill_task_leases};

-- --- the schema's bookkeeping --------------------------------------------------------
-- The tables themselves are in schema.sql (the current schema, for a fresh database)
-- and migrations/NNN_*.sql (the steps from each older version); schema.py applies them.

-- name: create_schema_table
CREATE TABLE IF NOT EXISTS flowforge_schema (
    version integer PRIMARY KEY,
    applied_at {timestamp} NOT NULL
);

-- name: select_schema_version
SELECT coalesce(max(version), 0) AS version FROM flowforge_schema;

-- name: record_schema_version
INSERT INTO flowforge_schema (version, applied_at) VALUES (:version, {now});

-- --- the clock and the event log ----------------------------------------------------------

-- name: db_now
SELECT {now} AS db_now;

-- name: insert_stored_event
INSERT INTO {events_table} (originator_id, originator_version, topic, state)
VALUES (:originator_id, :originator_version, :topic, :state);

-- name: select_stored_events
SELECT originator_id, originator_version, topic, state
FROM {events_table} ORDER BY {event_order};

-- The events of some aggregates (a run's and its tasks': its audit log), in one read
-- instead of one per aggregate: each aggregate's in version order.
-- name: select_stored_events_of
SELECT originator_id, originator_version, topic, state
FROM {events_table} WHERE originator_id IN ({uuid_list[originator_ids]})
ORDER BY originator_id, originator_version;

-- --- creation and the rebuild: an event applied to the rows -------------------------------
-- A NULL :created_at is the transaction's own clock: a run's creation on PostgreSQL,
-- whose events get the same time in SQL (insert_stored_event_at_now), with no round
-- trip to ask the clock first (projector.TRANSACTION_NOW).

-- name: insert_workflow_run
INSERT INTO workflow_runs (id, {workflow_run_static_columns}, state,
                           started_at, finished_at, version, created_at, updated_at)
VALUES (:id, {workflow_run_static_values}, :state,
        NULL, NULL, :version, coalesce(:created_at, {now}), coalesce(:created_at, {now}))
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: select_run_by_idempotency_key
SELECT id FROM workflow_runs WHERE idempotency_key = :idempotency_key;

-- name: insert_task_run
INSERT INTO task_runs (id, {task_run_static_columns},
                       state, fencing_token, attempt, version, created_at, updated_at)
VALUES (:id, {task_run_static_values},
        :state, 0, 1, :version, coalesce(:created_at, {now}), coalesce(:created_at, {now}));

-- name: apply_task_run_event
UPDATE task_runs
SET {task_run_assignments}, version = :version, updated_at = :updated_at
WHERE id = :id AND version = :version - 1 AND state = :source
RETURNING id;

-- name: apply_workflow_run_event
UPDATE workflow_runs
SET {workflow_run_assignments}, version = :version, updated_at = :updated_at
WHERE id = :id AND version = :version - 1 AND state = :source
RETURNING id;

-- name: delete_task_runs
DELETE FROM task_runs;

-- name: delete_workflow_runs
DELETE FROM workflow_runs;

-- name: insert_outbox
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
VALUES (:dispatch_id, :task_run_id, :task_key, :task_type, :fencing_token,
        coalesce(:created_at, {now}));

-- --- run wake-ups: which runs the scheduler must advance ------------------------------
-- A transition that can change what its run should do next (a task finished, reaped,
-- cancelled or made ready; a run created or cancelled) adds a row here in its own
-- transaction; once it commits, the store wakes the schedulers (wakeups.py). Rows are
-- only ever inserted by writers and deleted by an advance, so a writer never waits for
-- a scheduler (flowforge/app/advance.py says why the advance deletes them first).

-- :task_key names the task whose change the mark announces; NULL marks the run itself.
-- name: mark_run_wakeup
INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
VALUES (:workflow_run_id, {now}, :task_key);

-- A finish that advanced its run in its own transaction, as the transaction's last
-- statement: the mark for a scheduler is needed only when the advance left the run
-- unsettled (not succeeded, yet no task unfinished: a task failed for good or was
-- cancelled). Sent with the COMMIT, so the finish needs no round trip after the run's
-- completion (advance.advance_after_finish). Its rows: the mark, if one was written.
-- name: mark_run_wakeup_unless_settled
INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
SELECT :workflow_run_id, {now}, :task_key
WHERE NOT EXISTS (
        SELECT 1 FROM workflow_runs WHERE id = :workflow_run_id AND state = :succeeded
    )
    AND NOT EXISTS (
        SELECT 1 FROM task_runs
        WHERE workflow_run_id = :workflow_run_id AND state IN ({unfinished_task_states})
    )
RETURNING workflow_run_id;

-- Oldest first; several schedulers see the same list and divide it with
-- try_lock_workflow_run. A mark whose run is gone (deleted by hand) is never picked.
-- name: select_woken_runs
SELECT w.workflow_run_id FROM run_wakeups w
JOIN workflow_runs r ON r.id = w.workflow_run_id
GROUP BY w.workflow_run_id ORDER BY min(w.id) LIMIT :limit;

-- name: delete_run_wakeups
DELETE FROM run_wakeups WHERE workflow_run_id = :workflow_run_id RETURNING task_key;

-- name: count_run_wakeups
SELECT count(*) AS marks FROM run_wakeups;

-- The safety net's timers: runs with a retry that became due, and when the next retry
-- or lease expiry falls (the scheduler sleeps until then, not a whole interval).
-- name: select_runs_with_retries_due
SELECT DISTINCT workflow_run_id FROM task_runs {indexed_by_retry_due}
WHERE state = 'retrying' AND retry_due_at <= {now}
LIMIT :limit;

-- Delayed runs whose start time has come, by the database's clock (they start on the
-- safety net's pass: nothing marks a run when its time comes).
-- name: select_runs_due_to_start
SELECT id FROM workflow_runs
WHERE state = 'pending' AND start_at <= {now}
ORDER BY start_at LIMIT :limit;

-- A start time already past is not a timer: each pass tries that run (runs_due_to_start),
-- and a run no scheduler here may start (an embedded runner's scope leaves it out) would
-- otherwise make the timer fire again at once, pass after pass.
-- name: select_next_timers
SELECT {now} AS db_now,
       (SELECT min(retry_due_at) FROM task_runs WHERE state = 'retrying') AS retry_due_at,
       (SELECT min(lease_expires_at) FROM task_runs WHERE state = 'running')
           AS lease_expires_at,
       (SELECT min(deadline_at) FROM task_runs WHERE deadline_at IS NOT NULL)
           AS deadline_at,
       (SELECT min(start_at) FROM workflow_runs WHERE state = 'pending' AND start_at > {now})
           AS start_at;

-- --- the conditional writes ---------------------------------------------------------------
-- Each is ONE statement: the WHERE clause is the whole condition, the database decides
-- the race, and 0 rows means "lost" (not an error). They compute the new row in the
-- database (its clock, its token) and return it whole. One statement per transition
-- (flowforge/projections/writes.py has one method for each).

-- name: task_move
UPDATE task_runs
SET state = :target,
    finished_at = CASE WHEN :terminal THEN {now} ELSE finished_at END,
    retry_due_at = NULL, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source
RETURNING *;

-- name: task_retry_ready
UPDATE task_runs
SET state = :target, retry_due_at = NULL, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source
  AND (retry_due_at IS NULL OR retry_due_at <= {now})
RETURNING *;

-- The lease is the caller's (:lease_seconds) or, when that is NULL, the row's own (the
-- definition's, recorded at creation): a worker claims without reading the definition.
-- A row without one (written by a FlowForge before migration 5) is not claimed by a
-- claim that brings none: a running task must have a lease for the reaper to end.
-- Only a task without a limit: no counter row for its type or its run (two probes of
-- tables as small as the number of limits). A limited task's claim is
-- task_claim_limited's, with its slots (docs/scheduling/limits.md).
-- What a claim writes, limited or not: token + 1, the lease and the execution
-- timeout's deadline from the database's now, the first claim's start.
-- macro: claim_assignments
SET state = :target, fencing_token = fencing_token + 1,
    lease_owner = :worker_id,
    lease_expires_at = {now} + {seconds_or_row[lease_seconds]},
    deadline_at = {now} + {seconds_of_row[timeout_seconds]},
    started_at = coalesce(started_at, {now}),
    version = version + 1, updated_at = {touched_at}

-- name: task_claim
UPDATE task_runs
{claim_assignments}
WHERE id = :id AND state = :source AND coalesce(:lease_seconds, lease_seconds) IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM task_type_limits WHERE task_type = task_runs.task_type)
  AND NOT EXISTS (SELECT 1 FROM run_limits WHERE workflow_run_id = task_runs.workflow_run_id)
RETURNING *;

-- name: task_finish
UPDATE task_runs
SET state = :target, lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL,
    finished_at = {now}, result = :result, error = :error, version = version + 1,
    updated_at = {touched_at}
WHERE id = :id AND state = :source AND fencing_token = :fencing_token
RETURNING *;

-- The execution timeout: the fail edge, taken for the attempt in hand (its token) once
-- its deadline has passed by the database's clock. The worker's own finish, later,
-- then matches no row: it is stale.
-- name: task_time_out
UPDATE task_runs
SET state = :target, lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL,
    finished_at = {now}, result = NULL, error = :error, version = version + 1,
    updated_at = {touched_at}
WHERE id = :id AND state = :source AND fencing_token = :fencing_token
  AND deadline_at < {now}
RETURNING *;

-- name: task_renew_lease
UPDATE task_runs
SET lease_expires_at = {now} + {seconds[lease_seconds]},
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND fencing_token = :fencing_token
RETURNING *;

-- name: task_reclaim
UPDATE task_runs
SET state = :target, fencing_token = fencing_token + 1, lease_owner = NULL,
    lease_expires_at = NULL, deadline_at = NULL, version = version + 1,
    updated_at = {touched_at}
WHERE id = :id AND state = :source AND lease_expires_at < {now}
RETURNING *;

-- name: task_schedule_retry
UPDATE task_runs
SET state = :target, attempt = attempt + 1, finished_at = NULL, lease_owner = NULL,
    lease_expires_at = NULL,
    retry_due_at = {now} + {seconds[delay_seconds]},
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND attempt < max_attempts
RETURNING *;

-- A claim's run started, if no one has started it yet: the spec's derivation makes a
-- run with a running task running, and no scheduler need look at a run only to start
-- it (its creation marks nothing). Sent right after the claim (Writes.claim,
-- claims_with_runs); acts only if the task is running now (the claim won, or
-- another's committed). The run row is tried, never waited for (SKIP LOCKED): the
-- claim holds its task row, and every advance takes the run row first. A run held
-- elsewhere is started by its holder (a scheduler's advance, another claim) or by the
-- task's finish (run_start_after_finish, advance.advance_after_finish). The UPDATE
-- re-checks the state on the row it locked.
-- name: run_start_after_claim
UPDATE workflow_runs
SET state = :target, started_at = {now}, version = version + 1, updated_at = {touched_at}
WHERE id = (
    SELECT id FROM workflow_runs
    WHERE id = (SELECT workflow_run_id FROM task_runs WHERE id = :task_run_id AND state = :claimed)
        AND state = :source {for_update_skip_locked}
) AND state = :source
RETURNING *;

-- The start edge waits for a delayed run's start time, by the database's clock.
-- name: run_move
UPDATE workflow_runs
SET state = :target,
    started_at = CASE WHEN :starts THEN {now} ELSE started_at END,
    finished_at = CASE WHEN :terminal THEN {now} ELSE finished_at END,
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source
    AND (NOT :starts OR start_at IS NULL OR start_at <= {now})
RETURNING *;

-- A user's cancel: ONE conditional write over both edges that leave a live run
-- (cancel_before_start from pending, cancel from running), so it cannot lose to a
-- concurrent start: whichever commits first, the cancel's predicate still matches. The
-- edge taken is the row's actual source, read from the row this statement updated (a
-- run has started_at exactly when it left pending: only the start edge sets it), not
-- from an earlier read that a concurrent start could have made stale.
-- name: run_cancel
UPDATE workflow_runs
SET state = :target,
    finished_at = {now},
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state IN (:pending, :running)
RETURNING *, CASE WHEN started_at IS NULL THEN :pending ELSE :running END AS source;

-- --- queries: the projected tables, never the event log ----------------------------------

-- name: select_task_run
SELECT * FROM task_runs WHERE id = :id;

-- name: select_workflow_run
SELECT * FROM workflow_runs WHERE id = :id;

-- A worker's read before its claim, beside select_task_run: the task's run, unless it
-- is one the worker knows already (:known_runs, a JSON array of run ids; a run's
-- definition can be large, and it never changes).
-- name: select_run_of_task_unless_known
SELECT * FROM workflow_runs
WHERE id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
    AND id NOT IN ({uuid_list[known_runs]});

-- The same for a worker's batch: the runs of its tasks, each once.
-- name: select_runs_of_tasks_unless_known
SELECT * FROM workflow_runs
WHERE id IN (SELECT workflow_run_id FROM task_runs WHERE id IN ({uuid_list[task_run_ids]}))
    AND id NOT IN ({uuid_list[known_runs]});

-- One advance of a run at a time: the scheduler's per-run transaction locks the run row
-- before any task row, so it can never deadlock against another advance (or a rebuild,
-- which locks workflow_runs before task_runs).
-- name: lock_workflow_run
SELECT * FROM workflow_runs WHERE id = :id {for_update};

-- A woken run another scheduler is advancing is skipped, not waited for: schedulers
-- divide the woken runs between them.
-- name: try_lock_workflow_run
SELECT * FROM workflow_runs WHERE id = :id {for_update_skip_locked};

-- The results of some tasks of one run: a worker's upstream results are its own
-- dependencies', read by the (workflow_run_id, task_key) key, never the run's N rows.
-- name: select_task_results
SELECT task_key, result FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND task_key IN ({text_list[task_keys]});

-- The rows an advance of some changes needs: the changed tasks, their dependents and
-- their dependents' dependencies, by the (workflow_run_id, task_key) key.
-- A run's unfinished tasks as they are, each locked, in id order: what an ended run's
-- advance cancels. All its task rows first, then (as the running ones' cancels free
-- slots) counter rows: the order every writer takes them in.
-- name: lock_unfinished_task_runs_of_run
SELECT * FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND state IN ({unfinished_task_states})
ORDER BY id {for_update};

-- A batch's task rows, locked in id order before any of its statements frees a counter
-- row (a success of a limited task frees its slots in the finish's own statement).
-- name: lock_task_runs_in_id_order
SELECT id FROM task_runs WHERE id IN ({uuid_list[task_run_ids]}) ORDER BY id {for_update};

-- name: select_task_runs_by_keys
SELECT * FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND task_key IN ({text_list[task_keys]});

-- Whether a run has a task still to finish ('unfinished': one probe of the unfinished
-- tasks' partial index, however many tasks the run has), else whether any was
-- cancelled (a scan of the run's tasks, once they are all done) or all succeeded.
-- The succeed edge of a running run whose tasks are all done, none cancelled: run_move's
-- write for that edge, guarded by select_run_completion's two tests, so that a finish
-- sends the check and the edge in one round trip (RunWrites.succeed_when_complete).
-- name: run_succeed_when_complete
UPDATE workflow_runs
SET state = :target, finished_at = {now}, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source
    AND NOT EXISTS (
        SELECT 1 FROM task_runs
        WHERE workflow_run_id = :id AND state IN ({unfinished_task_states})
    )
    AND NOT EXISTS (SELECT 1 FROM task_runs WHERE workflow_run_id = :id AND state = 'cancelled')
RETURNING *;

-- name: select_run_completion
SELECT CASE
    WHEN EXISTS (
        SELECT 1 FROM task_runs
        WHERE workflow_run_id = :workflow_run_id AND state IN ({unfinished_task_states})
    ) THEN 'unfinished'
    WHEN EXISTS (
        SELECT 1 FROM task_runs WHERE workflow_run_id = :workflow_run_id AND state = 'cancelled'
    ) THEN 'cancelled'
    ELSE 'succeeded'
END AS completion;

-- Whether any task of a run has moved since its creation (a task's first version is its
-- creation): a run just started with none has nothing else to advance.
-- name: select_run_has_moved_tasks
SELECT EXISTS (
    SELECT 1 FROM task_runs WHERE workflow_run_id = :workflow_run_id AND version > 1
) AS moved;

-- A run's state, locked like try_lock_workflow_run, without its definition and inputs
-- (an advance of some changes needs only the state; the definition is cached).
-- name: try_lock_workflow_run_state
SELECT state FROM workflow_runs WHERE id = :id {for_update_skip_locked};

-- The same, for the run of a task, as the FIRST statement of a worker's finish: the
-- finish then takes the run row before its task row, the order of every advance, and
-- workflow_runs' table lock before task_runs' (the subquery only reads task_runs),
-- the order of the rebuild's LOCK TABLE. A finish that took task_runs' lock first and
-- then asked for workflow_runs' deadlocked with a rebuild (tests/integration/
-- test_rebuild.py). Nothing when another transaction holds the run row. The row it
-- locked is noted for the rest of the transaction ({note_run_held}, PostgreSQL), for the
-- guards of a leaf's success (run_row_held in postgres.sql); the lock is taken inside
-- the CTE, so only a row actually locked is noted.
-- name: try_lock_workflow_run_of_task
WITH tried AS (
    SELECT id, state FROM workflow_runs
    WHERE id = (SELECT workflow_run_id FROM task_runs WHERE id = :id) {for_update_skip_locked}
)
SELECT state{note_run_held} FROM tried;

-- name: select_task_runs_of_run
SELECT * FROM task_runs WHERE workflow_run_id = :workflow_run_id ORDER BY created_at, task_key;

-- name: select_recent_runs
SELECT * FROM workflow_runs ORDER BY created_at DESC, id LIMIT :limit;

-- name: select_every_run
SELECT * FROM workflow_runs ORDER BY created_at, id;

-- name: select_ready_task_runs
SELECT * FROM task_runs WHERE state = 'ready' ORDER BY updated_at LIMIT :limit;

-- name: select_expired_leases
SELECT id FROM task_runs
WHERE state = 'running' AND lease_expires_at < {now}
ORDER BY lease_expires_at LIMIT :limit;

-- Running attempts past their execution timeout, with the token each is failed with.
-- name: select_overdue_tasks
SELECT id, fencing_token, workflow_run_id FROM task_runs
WHERE deadline_at < {now}
ORDER BY deadline_at LIMIT :limit;

-- The same, for a runner scoped to some runs (flowforge/app/scope.py): another run's
-- lease is left to that run's own runner or scheduler.
-- name: select_expired_leases_of_runs
SELECT id FROM task_runs
WHERE state = 'running' AND lease_expires_at < {now}
  AND workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY lease_expires_at LIMIT :limit;

-- A ready task whose dispatch was lost (dead-lettered past the delivery limit, or held
-- in memory by an embedded process that exited) would wait forever: the safety net
-- finds ready tasks that have waited longer than :older_than seconds with no dispatch
-- pending or recently published.
-- macro: stalled_ready
SELECT t.* FROM task_runs t
WHERE t.state = 'ready' AND t.updated_at <= {now} - {seconds[older_than]}
  AND NOT EXISTS (
      SELECT 1 FROM dispatch_outbox o
      WHERE o.task_run_id = t.id
        AND (o.published_at IS NULL OR o.published_at > {now} - {seconds[older_than]}))

-- name: select_stalled_ready
{stalled_ready}
ORDER BY t.updated_at LIMIT :limit;

-- The same, for a runner scoped to some runs: an embedded runner's start-up redispatch
-- (its in-process channel starts empty) must not add outbox rows to another run.
-- name: select_stalled_ready_of_runs
{stalled_ready}
  AND t.workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY t.updated_at LIMIT :limit;

-- What a sweep publishes of each pending row: the row, and its run's trace context
-- (docs/observability.md, "Traces"), which the dispatch carries in its headers. Read
-- by primary keys in a subquery, not joined: the row lock ({for_update_skip_locked})
-- takes the outbox rows only, never a task row a worker is claiming.
-- macro: pending_outbox
SELECT o.*, (SELECT r.trace_context FROM task_runs t JOIN workflow_runs r
             ON r.id = t.workflow_run_id WHERE t.id = o.task_run_id) AS trace_context
FROM dispatch_outbox o WHERE o.published_at IS NULL

-- Parallel publishers divide the pending rows (see {for_update_skip_locked}).
-- name: select_pending_outbox
{pending_outbox}
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- Only the dispatches of the task types a runner's workers have handlers for (the
-- embedded runner, ProcessGroup in flowforge/bootstrap.py): the others wait for theirs.
-- name: select_pending_outbox_of_types
{pending_outbox}
AND o.task_type IN ({text_list[task_types]})
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- Only the dispatches of some runs (a runner scoped to its own run: flowforge/app/
-- scope.py), found through their task rows. A semi-join, not a JOIN: the row lock
-- ({for_update_skip_locked}) then takes the outbox rows only, never a task row a
-- worker is claiming.
-- name: select_pending_outbox_of_runs
{pending_outbox}
AND o.task_run_id IN (SELECT id FROM task_runs WHERE workflow_run_id IN ({uuid_list[run_ids]}))
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- name: select_deployment
SELECT deployment_id FROM flowforge_deployment;

-- A sweep's whole batch in one statement (one per row was most of a sweep's server time).
-- name: mark_outbox_published
UPDATE dispatch_outbox SET published_at = {now} WHERE dispatch_id IN ({uuid_list[dispatch_ids]});

-- name: select_outbox_of_task_run
SELECT * FROM dispatch_outbox WHERE task_run_id = :task_run_id ORDER BY created_at;

-- name: count_pending_outbox
SELECT count(*) AS pending FROM dispatch_outbox WHERE published_at IS NULL;

-- The metrics' backlog (flowforge/metrics.py): the pending dispatches and the oldest's
-- creation time. The unfinished tasks by state: postgres.sql and sqlite.sql (each
-- through the unfinished tasks' partial index, not the whole table).
-- name: outbox_backlog
SELECT count(*) AS pending, min(created_at) AS created_at, {now} AS db_now
FROM dispatch_outbox WHERE published_at IS NULL;

-- --- concurrency limits (docs/scheduling/limits.md) ---------------------------------------
-- A counter row per limited task type and per limited run: ``running`` is how many of
-- its tasks hold a slot (are running since a claim that counted), kept by the claims'
-- and the finishes' conditional writes. ``last_claim`` / ``last_claim_took``: the last
-- limited claim that locked the row, and whether it took a slot (a claim reads back its
-- own decision by its :claim token: RETURNING shows only the new row, and a decision
-- made after waiting for another writer is made on that writer's row, not on the one
-- the statement first read). Counter rows are never deleted while they count.
-- macro: create_limit_tables
CREATE TABLE task_type_limits (
    task_type text PRIMARY KEY,
    max_running integer CONSTRAINT task_type_limits_max_running_positive
        CHECK (max_running >= 1),
    running integer NOT NULL CONSTRAINT task_type_limits_running_non_negative
        CHECK (running >= 0),
    last_claim text,
    last_claim_took boolean NOT NULL DEFAULT false,
    version {bigint} NOT NULL CONSTRAINT task_type_limits_version_non_negative
        CHECK (version >= 0),
    changed_at {timestamp},
    changed_by text
);
CREATE TABLE run_limits (
    workflow_run_id {uuid} PRIMARY KEY,
    max_running integer NOT NULL CONSTRAINT run_limits_max_running_positive
        CHECK (max_running >= 1),
    running integer NOT NULL CONSTRAINT run_limits_running_non_negative CHECK (running >= 0),
    last_claim text,
    last_claim_took boolean NOT NULL DEFAULT false
);
CREATE TABLE held_dispatches (
    task_run_id {uuid} PRIMARY KEY,
    workflow_run_id {uuid} NOT NULL,
    task_type text NOT NULL,
    held_by text NOT NULL CONSTRAINT held_dispatches_held_by_enum
        CHECK (held_by IN ('type', 'run')),
    held_at {timestamp} NOT NULL
);
CREATE INDEX held_dispatches_type_idx ON held_dispatches (task_type, held_at);
CREATE INDEX held_dispatches_run_idx ON held_dispatches (workflow_run_id, held_at)

-- The type limit of a claim of task :id: the smallest of the operator's limit (the
-- counter row's max_running, in scope) and the task's own; no limit is a huge one.
-- macro: type_limit_of_claim
coalesce(
    CASE WHEN max_running IS NULL
              OR (SELECT max_running FROM task_runs WHERE id = :id) < max_running
         THEN (SELECT max_running FROM task_runs WHERE id = :id)
         ELSE max_running END,
    2147483647)

-- This claim's decision on a counter row in scope: it took a slot / it was refused.
-- macro: took_here
(last_claim = :claim AND last_claim_took)

-- macro: refused_here
(last_claim = :claim AND NOT last_claim_took)

-- The task :id is running by a claim of this transaction (PostgreSQL: its row version
-- is this transaction's; SQLite: a single writer, so a task that took a slot here and
-- is running was claimed here).
-- macro: claimed_here
EXISTS (SELECT 1 FROM task_runs WHERE id = :id AND state = 'running'
        AND {written_by_this_transaction})

-- The task :task_run_id left running in this transaction: its slot is free. Checked
-- in SQL so that a batch can send it before it knows which finish won (leaves.py).
-- macro: freed_here
EXISTS (SELECT 1 FROM task_runs WHERE id = :task_run_id AND state <> 'running'
        AND {written_by_this_transaction})

-- A hold not yet answered by a dispatch: none made since it was held.
-- macro: unreleased
NOT EXISTS (SELECT 1 FROM dispatch_outbox o
            WHERE o.task_run_id = h.task_run_id AND o.created_at >= h.held_at)

-- The claim of a limited task (LimitWrites.claim), its statements in this order, in
-- one round trip. The task's row first, locked: every writer takes task rows (in id
-- order) before counter rows, so a claim never holds a counter row that a finish or an
-- advance holding this task's row waits for (docs/scheduling/limits.md, "Deadlocks").
-- Then the run's counter row, then the type's (the order every writer takes them in),
-- each ONE conditional write that takes a slot when there is room and otherwise keeps
-- the row as it is, locked either way until the commit.
-- name: lock_ready_task_for_claim
SELECT id FROM task_runs WHERE id = :id AND state = 'ready' {for_update};

-- name: take_run_slot
UPDATE run_limits
SET running = running + CASE WHEN running < max_running THEN 1 ELSE 0 END,
    last_claim = :claim, last_claim_took = (running < max_running)
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id AND state = 'ready')
RETURNING running, max_running, last_claim_took;

-- Not tried when the run refused: the type's row is left alone.
-- name: take_type_slot
UPDATE task_type_limits
SET running = running + CASE WHEN running < {type_limit_of_claim} THEN 1 ELSE 0 END,
    last_claim = :claim, last_claim_took = (running < {type_limit_of_claim})
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id AND state = 'ready')
  AND NOT EXISTS (
      SELECT 1 FROM run_limits
      WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
        AND {refused_here})
RETURNING running, {type_limit_of_claim} AS max_running, last_claim_took;

-- task_claim, only if this claim took a slot of every limit the task has.
-- name: task_claim_limited
UPDATE task_runs
{claim_assignments}
WHERE id = :id AND state = :source AND coalesce(:lease_seconds, lease_seconds) IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM task_type_limits
                  WHERE task_type = task_runs.task_type AND NOT coalesce({took_here}, false))
  AND NOT EXISTS (SELECT 1 FROM run_limits
                  WHERE workflow_run_id = task_runs.workflow_run_id
                    AND NOT coalesce({took_here}, false))
RETURNING *;

-- A slot taken for a claim that then lost (another worker claimed the task first, or
-- the other limit refused) is given back in the same transaction. Its mark stays as it
-- was (took), so that hold_dispatch names the limit that refused, not this one.
-- name: return_run_slot
UPDATE run_limits SET running = running - 1
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
  AND {took_here} AND NOT {claimed_here}
RETURNING running;

-- name: return_type_slot
UPDATE task_type_limits SET running = running - 1
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id)
  AND {took_here} AND NOT {claimed_here}
RETURNING running;

-- A refused claim holds the task's dispatch, written while this transaction holds the
-- refusing counter row: a finish that frees a slot of it waits for that row, so it
-- commits after this hold and sees it (the race argument: docs/scheduling/limits.md).
-- name: hold_dispatch
INSERT INTO held_dispatches (task_run_id, workflow_run_id, task_type, held_by, held_at)
SELECT id, workflow_run_id, task_type,
       CASE WHEN EXISTS (SELECT 1 FROM run_limits
                         WHERE workflow_run_id = task_runs.workflow_run_id AND {refused_here})
            THEN 'run' ELSE 'type' END,
       {now}
FROM task_runs
WHERE id = :id AND state = 'ready'
  AND (EXISTS (SELECT 1 FROM run_limits
               WHERE workflow_run_id = task_runs.workflow_run_id AND {refused_here})
       OR EXISTS (SELECT 1 FROM task_type_limits
                  WHERE task_type = task_runs.task_type AND {refused_here}))
ON CONFLICT (task_run_id) DO UPDATE SET held_by = excluded.held_by, held_at = excluded.held_at
RETURNING held_by;

-- name: unhold_claimed
DELETE FROM held_dispatches WHERE task_run_id = :id AND {claimed_here};

-- Last: the claim's marks cleared, so a counter row holds nothing of one claim after
-- its transaction (and is what a rebuild makes of it).
-- name: clear_run_claim_mark
UPDATE run_limits SET last_claim = NULL, last_claim_took = false
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
  AND last_claim = :claim;

-- name: clear_type_claim_mark
UPDATE task_type_limits SET last_claim = NULL, last_claim_took = false
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id) AND last_claim = :claim;

-- A task that left running (finish, cancel, reap) frees its slots: its run's, then its
-- type's (the claims' order), then dispatches the oldest still-ready task each freed
-- limit holds, in a statement of its own: its snapshot is taken after the counter rows'
-- locks were granted, so it sees a hold that a refusal holding them committed.
-- name: free_run_slot
UPDATE run_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
WHERE workflow_run_id = :workflow_run_id AND {freed_here};

-- name: free_type_slot
UPDATE task_type_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
WHERE task_type = :task_type AND {freed_here};

-- name: release_held_dispatches
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
SELECT {random_uuid}, t.id, t.task_key, t.task_type, t.fencing_token,
       CASE WHEN h.held_at > {now} THEN h.held_at ELSE {now} END
FROM held_dispatches h JOIN task_runs t ON t.id = h.task_run_id
WHERE {freed_here} AND h.task_run_id IN (
    SELECT task_run_id FROM (
        SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
        WHERE h.task_type = :task_type AND h.held_by = 'type' AND r.state = 'ready'
          AND {unreleased}
        ORDER BY h.held_at, h.task_run_id LIMIT 1) AS oldest_of_type
    UNION
    SELECT task_run_id FROM (
        SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
        WHERE h.workflow_run_id = :workflow_run_id AND h.held_by = 'run'
          AND r.state = 'ready' AND {unreleased}
        ORDER BY h.held_at, h.task_run_id LIMIT 1) AS oldest_of_run)
RETURNING task_run_id;

-- A raised or removed limit: up to :limit of the type's held tasks dispatched again.
-- name: release_held_of_type
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
SELECT {random_uuid}, t.id, t.task_key, t.task_type, t.fencing_token,
       CASE WHEN h.held_at > {now} THEN h.held_at ELSE {now} END
FROM held_dispatches h JOIN task_runs t ON t.id = h.task_run_id
WHERE h.task_run_id IN (
    SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
    WHERE h.task_type = :task_type AND h.held_by = 'type' AND r.state = 'ready'
      AND {unreleased}
    ORDER BY h.held_at, h.task_run_id LIMIT :limit)
RETURNING task_run_id;

-- The operator's change of a type's limit (TaskTypeLimit's event at :version), under
-- lock_task_runs_for_limit: a new counter row counts the type's running tasks exactly.
-- name: change_task_type_limit
INSERT INTO task_type_limits (task_type, max_running, running, version, changed_at,
                              changed_by)
VALUES (:task_type, :max_running,
        (SELECT count(*) FROM task_runs WHERE task_type = :task_type AND state = 'running'),
        :version, :changed_at, :changed_by)
ON CONFLICT (task_type) DO UPDATE
SET max_running = excluded.max_running, version = excluded.version,
    changed_at = excluded.changed_at, changed_by = excluded.changed_by
WHERE task_type_limits.version = excluded.version - 1
RETURNING *;

-- A counter row for a type that a definition's task limits, if it has none yet (also
-- under lock_task_runs_for_limit).
-- name: ensure_task_type_counter
INSERT INTO task_type_limits (task_type, max_running, running, version)
VALUES (:task_type, NULL,
        (SELECT count(*) FROM task_runs WHERE task_type = :task_type AND state = 'running'), 0)
ON CONFLICT (task_type) DO NOTHING;

-- name: insert_run_limit
INSERT INTO run_limits (workflow_run_id, max_running, running) VALUES (:workflow_run_id,
    :max_running, 0);

-- name: select_task_type_limit
SELECT * FROM task_type_limits WHERE task_type = :task_type;

-- name: select_task_type_limits
SELECT * FROM task_type_limits ORDER BY task_type;

-- name: select_run_limit
SELECT * FROM run_limits WHERE workflow_run_id = :workflow_run_id;

-- name: select_held_dispatch
SELECT * FROM held_dispatches WHERE task_run_id = :task_run_id;

-- The rebuild: limits are projected again from the log and their counters recounted
-- from the rebuilt task rows (held dispatches are delivery state, like the outbox: kept).
-- name: delete_limits
DELETE FROM task_type_limits;

-- name: delete_run_limits
DELETE FROM run_limits;

-- name: insert_task_type_limit_counters
INSERT INTO task_type_limits (task_type, max_running, running, version)
SELECT DISTINCT task_type, CAST(NULL AS integer), 0, 0 FROM task_runs
WHERE max_running IS NOT NULL
ON CONFLICT (task_type) DO NOTHING;

-- name: recount_task_type_limits
UPDATE task_type_limits SET running = (
    SELECT count(*) FROM task_runs
    WHERE task_runs.task_type = task_type_limits.task_type AND state = 'running');

-- name: recount_run_limits
UPDATE run_limits SET running = (
    SELECT count(*) FROM task_runs
    WHERE task_runs.workflow_run_id = run_limits.workflow_run_id AND state = 'running');
