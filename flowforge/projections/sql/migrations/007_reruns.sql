-- Migration 7: reruns. A run may rerun another (`flowforge rerun`): the run it reruns,
-- and, on each task whose result it carried over instead of running it again, where
-- that result was produced (the original run, task run and attempt). All NULL on the
-- rows that exist: they were submitted, and ran their own handlers. Not a foreign key:
-- the rebuild deletes and re-inserts the runs in log order, and the link is a fact of
-- the log, not something the table must police.
ALTER TABLE workflow_runs ADD COLUMN rerun_of {uuid};
ALTER TABLE task_runs ADD COLUMN carried_from_run_id {uuid};
ALTER TABLE task_runs ADD COLUMN carried_from_task_run_id {uuid};
ALTER TABLE task_runs ADD COLUMN carried_from_attempt integer
    CONSTRAINT task_runs_carried_from_attempt_positive CHECK (carried_from_attempt >= 1);
