-- Migration 3: event-driven advancement. A transition that can change what its run
-- should do next marks the run (run_wakeups), and the scheduler advances only the marked
-- runs; retries that become due are found by their own index.

CREATE TABLE run_wakeups (
    id {serial_primary_key},
    workflow_run_id {uuid} NOT NULL,
    marked_at {timestamp} NOT NULL
);
CREATE INDEX run_wakeups_workflow_run_idx ON run_wakeups (workflow_run_id);
CREATE INDEX task_runs_retry_due_idx ON task_runs (retry_due_at) WHERE state = 'retrying';

-- Every run the old scheduler would have advanced on its next pass is marked, so the
-- first pass after the upgrade does the same work.
INSERT INTO run_wakeups (workflow_run_id, marked_at)
SELECT id, {now} FROM workflow_runs WHERE state IN ('pending', 'running')
UNION
SELECT DISTINCT workflow_run_id, {now} FROM task_runs
WHERE state IN ('pending', 'ready', 'running', 'retrying', 'failed');
