-- Each attempt's captured output (docs/logs.md; processes/capture.py captures it,
-- app/attempt_logs.py stores and reads it), for both databases.

-- One claim's output, after its outcome: the run is the task's own (a task archived
-- meanwhile gets none: no row is left without its run). A second write for the same
-- claim (an outcome retried after a lost COMMIT) keeps the first.
-- name: insert_attempt_log
INSERT INTO attempt_logs (task_run_id, fencing_token, workflow_run_id, attempt, worker_id,
                          output, dropped_chars, written_at)
SELECT id, :fencing_token, workflow_run_id, :attempt, :worker_id, :output, :dropped_chars,
       {now}
FROM task_runs WHERE id = :task_run_id
ON CONFLICT (task_run_id, fencing_token) DO NOTHING;

-- A task's attempts' outputs, in the order of their claims.
-- name: select_attempt_logs
SELECT * FROM attempt_logs WHERE task_run_id = :task_run_id ORDER BY fencing_token;

-- The archive takes a run's attempt logs with it (archive.sql), and a restore puts
-- them back as they were.
-- name: archive_attempt_log_rows
SELECT task_run_id, fencing_token, workflow_run_id, attempt, worker_id, output,
       dropped_chars, written_at
FROM attempt_logs WHERE workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY workflow_run_id, task_run_id, fencing_token;

-- name: archive_delete_attempt_logs
DELETE FROM attempt_logs WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: restore_attempt_log
INSERT INTO attempt_logs (task_run_id, fencing_token, workflow_run_id, attempt, worker_id,
                          output, dropped_chars, written_at)
VALUES (:task_run_id, :fencing_token, :workflow_run_id, :attempt, :worker_id, :output,
        :dropped_chars, :written_at);
