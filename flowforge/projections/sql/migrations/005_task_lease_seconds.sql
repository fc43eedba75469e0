-- Migration 5: a task row carries the lease its claim takes (the definition's, the
-- task's own or the workflow's), so a worker claims a task without reading its run's
-- definition first. Rows created before it get theirs from their run's definition.
ALTER TABLE task_runs ADD COLUMN lease_seconds {real}
    CONSTRAINT task_runs_lease_seconds_positive CHECK (lease_seconds > 0);
{fill_task_leases};
