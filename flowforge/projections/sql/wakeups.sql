-- The run wake-ups' statements: which runs the scheduler must advance, for both databases,
-- with the macros of common.sql; flowforge.projections.statements loads them with it.

-- A transition that can change what its run should do next (a task finished, reaped,
-- cancelled or made ready; a run created or cancelled) adds a row here in its own
-- transaction; once it commits, the store wakes the schedulers (wakeups.py). Rows are
-- only ever inserted by writers and deleted by an advance, so a writer never waits for
-- a scheduler (flowforge/app/advance.py says why the advance deletes them first).

-- :task_key names the task whose change the mark announces; NULL marks the run itself.
-- name: mark_run_wakeup
INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
VALUES (:workflow_run_id, {now}, :task_key);

-- A finish that advanced its run in its own transaction, as the transaction's last
-- statement: the mark for a scheduler is needed only when the advance left the run
-- unsettled (not succeeded, yet no task unfinished: a task failed for good or was
-- cancelled). Sent with the COMMIT, so the finish needs no round trip after the run's
-- completion (advance.advance_after_finish). Its rows: the mark, if one was written.
-- name: mark_run_wakeup_unless_settled
INSERT INTO run_wakeups (workflow_run_id, marked_at, task_key)
SELECT :workflow_run_id, {now}, :task_key
WHERE NOT EXISTS (
        SELECT 1 FROM workflow_runs WHERE id = :workflow_run_id AND state = :succeeded
    )
    AND NOT EXISTS (
        SELECT 1 FROM task_runs
        WHERE workflow_run_id = :workflow_run_id AND state IN ({unfinished_task_states})
    )
RETURNING workflow_run_id;

-- Oldest first; several schedulers see the same list and divide it with
-- try_lock_workflow_run. A mark whose run is gone (deleted by hand) is never picked.
-- name: select_woken_runs
SELECT w.workflow_run_id FROM run_wakeups w
JOIN workflow_runs r ON r.id = w.workflow_run_id
GROUP BY w.workflow_run_id ORDER BY min(w.id) LIMIT :limit;

-- name: delete_run_wakeups
DELETE FROM run_wakeups WHERE workflow_run_id = :workflow_run_id RETURNING task_key;

-- name: count_run_wakeups
SELECT count(*) AS marks FROM run_wakeups;
