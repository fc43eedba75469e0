-- Migration 8: execution timeouts. A task row carries its timeout (the definition's, the
-- task's own or the workflow's; NULL: none), and, while an attempt runs, the deadline
-- its claim set (the claim's time plus the timeout, by the database's clock). The
-- scheduler fails an attempt past its deadline (task_time_out). Rows created before it
-- have no timeout, as their definitions could not have one.
ALTER TABLE task_runs ADD COLUMN timeout_seconds {real}
    CONSTRAINT task_runs_timeout_seconds_positive CHECK (timeout_seconds > 0);
ALTER TABLE task_runs ADD COLUMN deadline_at {timestamp}
    CONSTRAINT task_runs_deadline_only_running CHECK (deadline_at IS NULL OR state = 'running');
CREATE INDEX task_runs_deadline_at_idx ON task_runs (deadline_at)
    WHERE deadline_at IS NOT NULL;
