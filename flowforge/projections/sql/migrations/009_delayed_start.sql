-- Migration 9: delayed starts. A run may be submitted with a start time (`flowforge
-- submit --at/--in`, start_workflow_run(start_at=...)): it stays pending until then by
-- the database's clock. NULL on the rows that exist: they started at once. The index
-- finds the pending runs whose start has come (the scheduler's safety net) and the
-- earliest start to come (its timer).
ALTER TABLE workflow_runs ADD COLUMN start_at {timestamp};
CREATE INDEX workflow_runs_start_at_idx ON workflow_runs (start_at) WHERE state = 'pending';
