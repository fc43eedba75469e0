-- Migration 15: runs moved out of the live database into an archive file (`flowforge db
-- archive`; docs/operations.md). One row per archived run, written in the transaction
-- that deletes the run's rows and events and deleted by the one that restores them, so
-- a run is in exactly one place: live, or in the file this row names.
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
-- The archive's choice of runs: terminal, by the time they finished.
CREATE INDEX workflow_runs_finished_at_idx ON workflow_runs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
