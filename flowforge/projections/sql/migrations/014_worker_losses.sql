-- Migration 13: a worker lost too often (docs/execution-model.md, "A worker lost too
-- often"). A task row carries its bound of lost workers (the definition's, the task's
-- own or the workflow's; NULL on the rows that exist: the default,
-- lost_workers.DEFAULT_MAX_WORKER_LOSSES) and how many of its leases have expired so far
-- (0 on the rows that exist: their earlier losses were not counted).
ALTER TABLE task_runs ADD COLUMN max_worker_losses integer
    CONSTRAINT task_runs_max_worker_losses_positive CHECK (max_worker_losses >= 1);
ALTER TABLE task_runs ADD COLUMN worker_losses integer NOT NULL DEFAULT 0
    CONSTRAINT task_runs_worker_losses_non_negative CHECK (worker_losses >= 0);
