-- FlowForge's projected tables and every statement that touches them, for PostgreSQL.
-- Blocks are "-- name: <name>"; flowforge.projections.queries loads them once.
-- Parameters are %(name)s; a parameter named like a column carries that column's value.
-- {task_run_states} and {workflow_run_states} are filled from the enums in
-- flowforge.aggregates.states when the schema is created, so the CHECKs cannot drift.

-- JSON columns are json, not jsonb: json keeps the document as written (1e+16 stays a
-- float, "\u0000" is allowed), and FlowForge never queries inside it.

-- name: create_schema_table
CREATE TABLE IF NOT EXISTS flowforge_schema (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: lock_schema
SELECT pg_advisory_xact_lock(7354219860);

-- name: select_schema_version
SELECT coalesce(max(version), 0) AS version FROM flowforge_schema;

-- name: record_schema_version
INSERT INTO flowforge_schema (version) VALUES (%(version)s);

-- name: migration_001
CREATE TABLE workflow_runs (
    id uuid PRIMARY KEY,
    workflow_name text NOT NULL,
    definition json NOT NULL,
    inputs json NOT NULL,
    idempotency_key text CONSTRAINT workflow_runs_idempotency_key_unique UNIQUE,
    state text NOT NULL
        CONSTRAINT workflow_runs_state_enum CHECK (state IN ({workflow_run_states})),
    started_at timestamptz,
    finished_at timestamptz,
    version bigint NOT NULL CONSTRAINT workflow_runs_version_positive CHECK (version >= 1),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX workflow_runs_created_at_idx ON workflow_runs (created_at DESC);
CREATE INDEX workflow_runs_active_idx ON workflow_runs (state)
    WHERE state IN ('pending', 'running');
CREATE TABLE task_runs (
    id uuid PRIMARY KEY,
    workflow_run_id uuid NOT NULL REFERENCES workflow_runs (id),
    task_key text NOT NULL,
    task_type text NOT NULL,
    depends_on json NOT NULL,
    max_attempts integer NOT NULL
        CONSTRAINT task_runs_max_attempts_positive CHECK (max_attempts >= 1),
    state text NOT NULL CONSTRAINT task_runs_state_enum CHECK (state IN ({task_run_states})),
    fencing_token bigint NOT NULL
        CONSTRAINT task_runs_fencing_token_non_negative CHECK (fencing_token >= 0),
    attempt integer NOT NULL CONSTRAINT task_runs_attempt_positive CHECK (attempt >= 1),
    lease_owner text,
    lease_expires_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    retry_due_at timestamptz,
    result json,
    error json,
    version bigint NOT NULL CONSTRAINT task_runs_version_positive CHECK (version >= 1),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT task_runs_workflow_run_task_key_unique UNIQUE (workflow_run_id, task_key),
    CONSTRAINT taskrun_lease_iff_running
        CHECK ((state = 'running') = (lease_expires_at IS NOT NULL))
);
CREATE INDEX task_runs_lease_expires_at_idx ON task_runs (lease_expires_at)
    WHERE state = 'running';
CREATE INDEX task_runs_unfinished_idx ON task_runs (workflow_run_id)
    WHERE state IN ('pending', 'ready', 'running', 'retrying', 'failed');
CREATE TABLE dispatch_outbox (
    dispatch_id uuid PRIMARY KEY,
    task_run_id uuid NOT NULL,
    task_key text NOT NULL,
    task_type text NOT NULL,
    fencing_token bigint NOT NULL
        CONSTRAINT dispatch_outbox_fencing_token_non_negative CHECK (fencing_token >= 0),
    created_at timestamptz NOT NULL,
    published_at timestamptz
);
CREATE INDEX dispatch_outbox_pending_idx ON dispatch_outbox (created_at)
    WHERE published_at IS NULL;
CREATE INDEX dispatch_outbox_task_run_idx ON dispatch_outbox (task_run_id);

-- The deployment's identity: one row, written once by the migration that creates it (at
-- `flowforge db init`). It names the deployment's dispatch topology and is carried by
-- every dispatch, so two deployments on one broker never take each other's tasks.
-- name: migration_002
CREATE TABLE flowforge_deployment (
    singleton integer PRIMARY KEY CHECK (singleton = 1),
    deployment_id text NOT NULL CHECK (length(deployment_id) = 12),
    created_at timestamptz NOT NULL
);
INSERT INTO flowforge_deployment (singleton, deployment_id, created_at)
VALUES (1, substr(md5(random()::text || clock_timestamp()::text), 1, 12), now());

-- name: select_deployment
SELECT deployment_id FROM flowforge_deployment;

-- name: db_now
SELECT now() AS db_now;

-- name: insert_stored_event
INSERT INTO flowforge_events (originator_id, originator_version, topic, state)
VALUES (%(originator_id)s, %(originator_version)s, %(topic)s, %(state)s);

-- name: select_stored_events
SELECT originator_id, originator_version, topic, state
FROM flowforge_events ORDER BY notification_id;

-- name: insert_workflow_run
INSERT INTO workflow_runs (id, workflow_name, definition, inputs, idempotency_key, state,
                           started_at, finished_at, version, created_at, updated_at)
VALUES (%(id)s, %(workflow_name)s, %(definition)s, %(inputs)s, %(idempotency_key)s,
        %(state)s, NULL, NULL, %(version)s, %(created_at)s, %(created_at)s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: select_run_by_idempotency_key
SELECT id FROM workflow_runs WHERE idempotency_key = %(idempotency_key)s;

-- name: insert_task_run
INSERT INTO task_runs (id, workflow_run_id, task_key, task_type, depends_on, max_attempts,
                       state, fencing_token, attempt, version, created_at, updated_at)
VALUES (%(id)s, %(workflow_run_id)s, %(task_key)s, %(task_type)s, %(depends_on)s,
        %(max_attempts)s, %(state)s, 0, 1, %(version)s, %(created_at)s, %(created_at)s);

-- name: apply_task_run_event
UPDATE task_runs
SET state = %(state)s, fencing_token = %(fencing_token)s, attempt = %(attempt)s,
    lease_owner = %(lease_owner)s, lease_expires_at = %(lease_expires_at)s,
    started_at = %(started_at)s, finished_at = %(finished_at)s,
    retry_due_at = %(retry_due_at)s, result = %(result)s, error = %(error)s,
    version = %(version)s, updated_at = %(updated_at)s
WHERE id = %(id)s AND version = %(version)s - 1
RETURNING id;

-- name: apply_workflow_run_event
UPDATE workflow_runs
SET state = %(state)s, started_at = %(started_at)s, finished_at = %(finished_at)s,
    version = %(version)s, updated_at = %(updated_at)s
WHERE id = %(id)s AND version = %(version)s - 1
RETURNING id;

-- name: delete_task_runs
DELETE FROM task_runs;

-- name: delete_workflow_runs
DELETE FROM workflow_runs;

-- name: lock_projected_tables
LOCK TABLE workflow_runs, task_runs IN EXCLUSIVE MODE;

-- name: insert_outbox
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
VALUES (%(dispatch_id)s, %(task_run_id)s, %(task_key)s, %(task_type)s, %(fencing_token)s,
        %(created_at)s);

-- The conditional writes. Each is ONE statement: the WHERE clause is the whole
-- condition, the database decides the race, and 0 rows means "lost" (not an error).
-- They compute the new row in the database (its clock, its token) and return it whole.
-- now() is the transaction's start: a writer that waited for another's row lock can
-- start before it and commit after it. greatest(now(), updated_at) keeps a row's
-- updated_at (the event's timestamp) from going backwards, so a task's audit log in
-- time order is its version order.

-- name: task_move
UPDATE task_runs
SET state = %(target)s,
    finished_at = CASE WHEN %(terminal)s THEN now() ELSE finished_at END,
    retry_due_at = NULL, version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s
RETURNING *;

-- name: task_retry_ready
UPDATE task_runs
SET state = %(target)s, retry_due_at = NULL, version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s
  AND (retry_due_at IS NULL OR retry_due_at <= now())
RETURNING *;

-- name: task_claim
UPDATE task_runs
SET state = %(target)s, fencing_token = fencing_token + 1,
    lease_owner = %(worker_id)s,
    lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
    started_at = coalesce(started_at, now()),
    version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s
RETURNING *;

-- name: task_finish
UPDATE task_runs
SET state = %(target)s, lease_owner = NULL, lease_expires_at = NULL, finished_at = now(),
    result = %(result)s, error = %(error)s, version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s AND fencing_token = %(fencing_token)s
RETURNING *;

-- name: task_renew_lease
UPDATE task_runs
SET lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
    version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s AND fencing_token = %(fencing_token)s
RETURNING *;

-- name: task_reclaim
UPDATE task_runs
SET state = %(target)s, fencing_token = fencing_token + 1, lease_owner = NULL,
    lease_expires_at = NULL, version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s AND lease_expires_at < now()
RETURNING *;

-- name: task_schedule_retry
UPDATE task_runs
SET state = %(target)s, attempt = attempt + 1, finished_at = NULL, lease_owner = NULL,
    lease_expires_at = NULL,
    retry_due_at = now() + %(delay_seconds)s * interval '1 second',
    version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s AND attempt < max_attempts
RETURNING *;

-- name: run_move
UPDATE workflow_runs
SET state = %(target)s,
    started_at = CASE WHEN %(starts)s THEN now() ELSE started_at END,
    finished_at = CASE WHEN %(terminal)s THEN now() ELSE finished_at END,
    version = version + 1, updated_at = greatest(now(), updated_at)
WHERE id = %(id)s AND state = %(source)s
RETURNING *;

-- Queries the processes read. They read the projected tables, never the event log.

-- name: select_task_run
SELECT * FROM task_runs WHERE id = %(id)s;

-- name: select_workflow_run
SELECT * FROM workflow_runs WHERE id = %(id)s;

-- One advance of a run at a time: the scheduler's per-run transaction locks the run row
-- before any task row, so it can never deadlock against another advance (or a rebuild,
-- which locks workflow_runs before task_runs).
-- name: lock_workflow_run
SELECT * FROM workflow_runs WHERE id = %(id)s FOR UPDATE;

-- name: select_task_runs_of_run
SELECT * FROM task_runs WHERE workflow_run_id = %(workflow_run_id)s ORDER BY created_at, task_key;

-- name: select_recent_runs
SELECT * FROM workflow_runs ORDER BY created_at DESC, id LIMIT %(limit)s;

-- name: select_ready_task_runs
SELECT * FROM task_runs WHERE state = 'ready' ORDER BY updated_at LIMIT %(limit)s;

-- name: select_expired_leases
SELECT id FROM task_runs
WHERE state = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at LIMIT %(limit)s;

-- name: select_runs_to_advance
SELECT id FROM workflow_runs WHERE state IN ('pending', 'running')
UNION
SELECT DISTINCT workflow_run_id FROM task_runs
WHERE state IN ('pending', 'ready', 'running', 'retrying');

-- A ready task whose dispatch was lost (dead-lettered past the delivery limit, or held
-- in memory by an embedded process that exited) would wait forever: the safety net
-- finds ready tasks that have waited longer than older_than seconds with no dispatch
-- pending or recently published.
-- name: select_stalled_ready
SELECT t.* FROM task_runs t
WHERE t.state = 'ready' AND t.updated_at <= now() - %(older_than)s * interval '1 second'
  AND NOT EXISTS (
      SELECT 1 FROM dispatch_outbox o
      WHERE o.task_run_id = t.id
        AND (o.published_at IS NULL OR o.published_at > now() - %(older_than)s * interval '1 second'))
ORDER BY t.updated_at LIMIT %(limit)s;

-- name: select_pending_outbox
SELECT * FROM dispatch_outbox WHERE published_at IS NULL
ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- Only the dispatches of the task types a publisher's workers have handlers for (the
-- embedded runner, flowforge/processes/runner.py): the others wait for their own runner.
-- name: select_pending_outbox_of_types
SELECT * FROM dispatch_outbox WHERE published_at IS NULL
AND task_type IN (SELECT json_array_elements_text(%(task_types)s))
ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: mark_outbox_published
UPDATE dispatch_outbox SET published_at = now() WHERE dispatch_id = %(dispatch_id)s;

-- name: select_outbox_of_task_run
SELECT * FROM dispatch_outbox WHERE task_run_id = %(task_run_id)s ORDER BY created_at;

-- name: count_pending_outbox
SELECT count(*) AS pending FROM dispatch_outbox WHERE published_at IS NULL;
