-- Migration 4: a mark names the task whose change it announces (NULL: the run itself,
-- e.g. its creation or a user's cancel), so an advance can handle that task's
-- consequences alone instead of reading every task of the run.
ALTER TABLE run_wakeups ADD COLUMN task_key text;
