-- The current schema, in one piece: `flowforge db init` on an empty database runs this
-- and records every migration as applied. Same macros as common.sql.
--
-- A change to the schema is made here AND as a new migrations/NNN_<what>.sql that takes
-- a database of the previous version to the same place: the test
-- tests/integration/projections/test_migrations.py builds the oldest version, migrates it,
-- and compares its catalog with a fresh database made from this file, on both backends.

CREATE TABLE workflow_runs (
    id {uuid} PRIMARY KEY,
    workflow_name text NOT NULL,
    definition {json} NOT NULL,
    inputs {json} NOT NULL,
    idempotency_key text CONSTRAINT workflow_runs_idempotency_key_unique UNIQUE,
    state text NOT NULL
        CONSTRAINT workflow_runs_state_enum CHECK (state IN ({workflow_run_states})),
    started_at {timestamp},
    finished_at {timestamp},
    version {bigint} NOT NULL CONSTRAINT workflow_runs_version_positive CHECK (version >= 1),
    created_at {timestamp} NOT NULL,
    updated_at {timestamp} NOT NULL,
    rerun_of {uuid},
    start_at {timestamp},
    trace_context {json},
    definition_brief {json}
);
CREATE INDEX workflow_runs_created_at_idx ON workflow_runs (created_at DESC);
CREATE INDEX workflow_runs_active_idx ON workflow_runs (state)
    WHERE state IN ('pending', 'running');
CREATE TABLE task_runs (
    id {uuid} PRIMARY KEY,
    workflow_run_id {uuid} NOT NULL REFERENCES workflow_runs (id),
    task_key text NOT NULL,
    task_type text NOT NULL,
    depends_on {json} NOT NULL,
    max_attempts integer NOT NULL
        CONSTRAINT task_runs_max_attempts_positive CHECK (max_attempts >= 1),
    state text NOT NULL CONSTRAINT task_runs_state_enum CHECK (state IN ({task_run_states})),
    fencing_token {bigint} NOT NULL
        CONSTRAINT task_runs_fencing_token_non_negative CHECK (fencing_token >= 0),
    attempt integer NOT NULL CONSTRAINT task_runs_attempt_positive CHECK (attempt >= 1),
    lease_owner text,
    lease_expires_at {timestamp},
    started_at {timestamp},
    finished_at {timestamp},
    retry_due_at {timestamp},
    result {json},
    error {json},
    version {bigint} NOT NULL CONSTRAINT task_runs_version_positive CHECK (version >= 1),
    created_at {timestamp} NOT NULL,
    updated_at {timestamp} NOT NULL,
    lease_seconds {real} CONSTRAINT task_runs_lease_seconds_positive CHECK (lease_seconds > 0),
    carried_from_run_id {uuid},
    carried_from_task_run_id {uuid},
    carried_from_attempt integer
        CONSTRAINT task_runs_carried_from_attempt_positive CHECK (carried_from_attempt >= 1),
    timeout_seconds {real}
        CONSTRAINT task_runs_timeout_seconds_positive CHECK (timeout_seconds > 0),
    deadline_at {timestamp}
        CONSTRAINT task_runs_deadline_only_running CHECK (deadline_at IS NULL OR state = 'running'),
    max_running integer CONSTRAINT task_runs_max_running_positive CHECK (max_running >= 1),
    max_worker_losses integer
        CONSTRAINT task_runs_max_worker_losses_positive CHECK (max_worker_losses >= 1),
    worker_losses integer NOT NULL DEFAULT 0
        CONSTRAINT task_runs_worker_losses_non_negative CHECK (worker_losses >= 0),
    map_index integer CONSTRAINT task_runs_map_index_non_negative CHECK (map_index >= 0),
    map_item {json},
    CONSTRAINT task_runs_workflow_run_task_key_unique UNIQUE (workflow_run_id, task_key),
    CONSTRAINT taskrun_lease_iff_running
        CHECK ((state = 'running') = (lease_expires_at IS NOT NULL))
);
CREATE INDEX task_runs_lease_expires_at_idx ON task_runs (lease_expires_at)
    WHERE state = 'running';
CREATE INDEX task_runs_deadline_at_idx ON task_runs (deadline_at)
    WHERE deadline_at IS NOT NULL;
CREATE INDEX task_runs_unfinished_idx ON task_runs (workflow_run_id)
    WHERE state IN ('pending', 'ready', 'running', 'retrying', 'failed');
CREATE TABLE dispatch_outbox (
    dispatch_id {uuid} PRIMARY KEY,
    task_run_id {uuid} NOT NULL,
    task_key text NOT NULL,
    task_type text NOT NULL,
    fencing_token {bigint} NOT NULL
        CONSTRAINT dispatch_outbox_fencing_token_non_negative CHECK (fencing_token >= 0),
    created_at {timestamp} NOT NULL,
    published_at {timestamp},
    -- Why the redispatch net gave the task this new dispatch (migration 13); NULL on a
    -- transition's own dispatch.
    reason text
);
CREATE INDEX dispatch_outbox_pending_idx ON dispatch_outbox (created_at)
    WHERE published_at IS NULL;
CREATE INDEX dispatch_outbox_task_run_idx ON dispatch_outbox (task_run_id);

-- The deployment's identity (migration 2): one row, written once.
CREATE TABLE flowforge_deployment (
    singleton integer PRIMARY KEY CONSTRAINT flowforge_deployment_one_row CHECK (singleton = 1),
    deployment_id text NOT NULL
        CONSTRAINT flowforge_deployment_id_length CHECK (length(deployment_id) = 12),
    created_at {timestamp} NOT NULL
);
INSERT INTO flowforge_deployment (singleton, deployment_id, created_at)
VALUES (1, {random_deployment_id}, {now});

CREATE TABLE run_wakeups (
    id {serial_primary_key},
    workflow_run_id {uuid} NOT NULL,
    marked_at {timestamp} NOT NULL,
    task_key text
);
CREATE INDEX run_wakeups_workflow_run_idx ON run_wakeups (workflow_run_id);
CREATE INDEX task_runs_retry_due_idx ON task_runs (retry_due_at) WHERE state = 'retrying';
CREATE INDEX workflow_runs_start_at_idx ON workflow_runs (start_at) WHERE state = 'pending';
{create_event_json_function};

-- Cron schedules (migration 11; docs/scheduling/cron.md): a name belongs to at most
-- one schedule that is not deleted; only an active schedule has a next fire time.
CREATE TABLE schedules (
    id {uuid} PRIMARY KEY,
    name text NOT NULL,
    cron text NOT NULL,
    timezone text NOT NULL,
    workflow_name text NOT NULL,
    definition {json} NOT NULL,
    inputs {json} NOT NULL,
    catch_up integer NOT NULL CONSTRAINT schedules_catch_up_non_negative CHECK (catch_up >= 0),
    state text NOT NULL CONSTRAINT schedules_state_enum CHECK (state IN ({schedule_states})),
    next_fire_at {timestamp},
    last_fire_at {timestamp},
    last_run_id {uuid},
    version {bigint} NOT NULL CONSTRAINT schedules_version_positive CHECK (version >= 1),
    created_at {timestamp} NOT NULL,
    updated_at {timestamp} NOT NULL,
    CONSTRAINT schedules_next_fire_iff_active
        CHECK ((state = 'active') = (next_fire_at IS NOT NULL))
);
CREATE UNIQUE INDEX schedules_live_name_unique ON schedules (name) WHERE state <> 'deleted';
CREATE INDEX schedules_next_fire_at_idx ON schedules (next_fire_at) WHERE state = 'active';

{create_limit_tables};

-- Runs moved to an archive file (migration 15; `flowforge db archive`,
-- docs/operations.md): a run is live or named here, never both.
CREATE TABLE archived_runs (
    workflow_run_id {uuid} PRIMARY KEY,
    workflow_name text NOT NULL,
    archive_file text NOT NULL,
    archived_at {timestamp} NOT NULL,
    event_count integer NOT NULL CONSTRAINT archived_runs_event_count_positive
        CHECK (event_count >= 1),
    task_count integer NOT NULL CONSTRAINT archived_runs_task_count_non_negative
        CHECK (task_count >= 0)
);
CREATE INDEX archived_runs_archive_file_idx ON archived_runs (archive_file);
CREATE INDEX workflow_runs_finished_at_idx ON workflow_runs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- The feed (migration 16; docs/feed.md): each event's transaction, and the feed's index,
-- on PostgreSQL; nothing on SQLite.
{record_feed_transactions};

-- Each attempt's captured output (migration 19; docs/logs.md): one row per claim.
CREATE TABLE attempt_logs (
    task_run_id {uuid} NOT NULL,
    fencing_token {bigint} NOT NULL,
    workflow_run_id {uuid} NOT NULL,
    attempt integer NOT NULL CONSTRAINT attempt_logs_attempt_positive CHECK (attempt >= 1),
    worker_id text NOT NULL,
    output text NOT NULL,
    dropped_chars {bigint} NOT NULL
        CONSTRAINT attempt_logs_dropped_chars_non_negative CHECK (dropped_chars >= 0),
    written_at {timestamp} NOT NULL,
    PRIMARY KEY (task_run_id, fencing_token)
);
CREATE INDEX attempt_logs_workflow_run_id_idx ON attempt_logs (workflow_run_id);
