-- Migration 17 (issue #50): a run's definition without its tasks, kept beside it, so a
-- read that names the run (status, history, why) does not parse a definition of
-- megabytes (reading.sql, select_workflow_run_brief). insert_workflow_run fills it.
ALTER TABLE workflow_runs ADD COLUMN definition_brief {json};
UPDATE workflow_runs SET definition_brief = {definition_without_tasks};
