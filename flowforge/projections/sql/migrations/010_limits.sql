-- Migration 10: concurrency limits (docs/scheduling/limits.md). A task's own
-- max_running from its definition (NULL: none, and on the rows that exist); a counter
-- row per limited task type (the operator's limit, projected from TaskTypeLimit events,
-- and the running count the claims keep) and per limited run; and the dispatches a
-- refused claim held, which a freed slot dispatches again.
ALTER TABLE task_runs ADD COLUMN max_running integer
    CONSTRAINT task_runs_max_running_positive CHECK (max_running >= 1);
{create_limit_tables};
