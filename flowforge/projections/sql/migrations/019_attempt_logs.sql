-- Migration 18 (issue #49): each attempt's captured output (its handler's stdout, stderr
-- and logging records, bounded per attempt: processes/capture.py), written by the
-- worker after the attempt's outcome and shown by `flowforge logs` (docs/logs.md). One
-- row per claim: the fencing token, not the attempt, is unique (a reaped claim and the
-- one after it share an attempt number). Archived and restored with its run.
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
