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
--     {for_update} {for_update_skip_locked} row locks (PostgreSQL only)
--     {indexed_by_retry_due} the retries' index, named where SQLite would not pick it
--   from the code (flowforge/projections/statements.py):
--     {events_table} {event_order}  the eventsourcing library's table and its order of
--       insertion (flowforge/projections/event_log.py: the seam to the library)
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
                           started_at, finished_at, version, created_at, updated_at,
                           definition_brief)
VALUES (:id, {workflow_run_static_values}, :state,
        NULL, NULL, :version, coalesce(:created_at, {now}), coalesce(:created_at, {now}),
        {definition_brief_of_parameter})
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

-- A promotion (:promotes, dependencies_satisfied) is also guarded by its run's start
-- time: while the run's start_at is still to come by the database's clock it matches
-- no row, whoever asks (docs/scheduling/delayed-start.md). One probe of the run's key.
-- :error is a cancel's cause (aggregates/cancel_cause.py); NULL keeps the row's error.
-- name: task_move
UPDATE task_runs
SET state = :target,
    finished_at = CASE WHEN :terminal THEN {now} ELSE finished_at END,
    error = coalesce(:error, error),
    retry_due_at = NULL, version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source
    AND (NOT :promotes OR NOT EXISTS (
        SELECT 1 FROM workflow_runs AS run
        WHERE run.id = task_runs.workflow_run_id AND run.start_at > {now}))
RETURNING *;

-- A fan-out's promotions in ONE statement (TaskWrites.promote): task_move's promotion of
-- every task of :task_run_ids still pending, none before its run's start time. Sent only by an
-- advance that holds the run's row, as every writer of a run's pending tasks does, so
-- no other transaction waits for these rows in another order. On PostgreSQL its
-- recorded variant also writes each promoted task's event, its dispatch and (with
-- :mark_runs) its run's mark, in the same statement ({promoted_follow_ups}, postgres.sql),
-- and returns only what the advance reads of the new rows: one statement and no row
-- decoded per task, where task_move was a round trip each (50,000 tasks: ~40 s).
-- name: task_promote_many
UPDATE task_runs
SET state = :target, retry_due_at = NULL, version = version + 1, updated_at = {touched_at}
WHERE id IN ({uuid_list[task_run_ids]}) AND state = :source
    AND NOT EXISTS (
        SELECT 1 FROM workflow_runs AS run
        WHERE run.id = task_runs.workflow_run_id AND run.start_at > {now})
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

-- The reaper's edge (reap_lease), below the task's bound of lost workers: the loss is
-- counted, and the task is ready again with a new token (FlowForge's extension: the
-- spec's reap_lease, bounded; docs/execution-model.md, "A worker lost too often").
-- name: task_reclaim
UPDATE task_runs
SET state = :target, fencing_token = fencing_token + 1, lease_owner = NULL,
    lease_expires_at = NULL, deadline_at = NULL, worker_losses = worker_losses + 1,
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND lease_expires_at < {now}
  AND worker_losses + 1 < coalesce(max_worker_losses, {default_max_worker_losses})
RETURNING *;

-- The reaper's fail edge at the bound: the same expired lease, counted, and the attempt
-- failed (WorkerLost) for the retry policy to decide. Guarded by the token and the count
-- the reaper read to write its error (how many losses it says): a row that moved since
-- matches nothing, and the next pass reads it again.
-- name: task_reclaim_failing
UPDATE task_runs
SET state = :target, fencing_token = fencing_token + 1, lease_owner = NULL,
    lease_expires_at = NULL, deadline_at = NULL, worker_losses = worker_losses + 1,
    finished_at = {now}, result = NULL, error = :error,
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = :source AND lease_expires_at < {now}
  AND fencing_token = :fencing_token AND worker_losses = :worker_losses
  AND worker_losses + 1 >= coalesce(max_worker_losses, {default_max_worker_losses})
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

-- A few of a run's tasks not succeeded yet (unfinished, or failed), read by the partial
-- index task_runs_unfinished_idx: what tells a finish that a wide fan-in's dependent
-- still waits (app/advance.py, _waiting_fan_ins) without reading its every dependency.
-- name: select_some_unfinished_task_keys
SELECT task_key FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND state IN ({unfinished_task_states})
LIMIT :limit;

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

-- Every task run at once, in no order (db rebuild's verification: a whole read).
-- name: select_every_task_run
SELECT * FROM task_runs;

-- name: select_ready_task_runs
SELECT * FROM task_runs WHERE state = 'ready' ORDER BY updated_at LIMIT :limit;

-- name: select_expired_leases
SELECT id FROM task_runs
WHERE state = 'running' AND lease_expires_at < {now}
ORDER BY lease_expires_at LIMIT :limit;

-- The tasks a worker id still holds (a worker that starts again under the same id:
-- what it held when it last stopped). The running tasks only, through the partial
-- index of running leases.
-- name: select_tasks_leased_by
SELECT * FROM task_runs
WHERE state = 'running' AND lease_expires_at IS NOT NULL AND lease_owner = :worker_id
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

-- name: select_deployment
SELECT deployment_id FROM flowforge_deployment;

-- The rebuild's read of the log: a page of it after a position, in its order (keyset
-- pages over the order's index, never the whole table in one answer).
-- name: select_stored_events_after
SELECT {event_order} AS position, originator_id, originator_version, topic, state
FROM {events_table} WHERE {event_order} > :position ORDER BY {event_order} LIMIT :limit;
