-- The archive's statements (`flowforge db archive` / `db restore`, app/archive.py;
-- docs/operations.md), for both databases, with the macros of common.sql. A run is
-- archived whole: its row, its tasks' rows, their dispatches, its limit bookkeeping,
-- its wake-up marks and every event of the run and its tasks; ``archived_runs`` says
-- which file holds it. Ids travel as JSON lists ({uuid_list[...]}), the events' as
-- the library stores them (hex on SQLite: ``originator_ids``).

-- The runs the archive may take: ended before :as_of, and no task of theirs still to
-- run (a run's end ends its tasks in its own transaction; this only makes sure). The
-- state list is workflow_runs_finished_at_idx's predicate, in its order.
-- name: archive_candidates
SELECT r.id, r.workflow_name, r.version,
       (SELECT count(*) FROM task_runs t WHERE t.workflow_run_id = r.id) AS task_count
FROM workflow_runs r
WHERE r.state IN ('succeeded', 'failed', 'cancelled') AND r.finished_at < :as_of
  AND NOT EXISTS (SELECT 1 FROM task_runs t WHERE t.workflow_run_id = r.id
                  AND t.state IN ('pending', 'ready', 'running', 'retrying'))
ORDER BY r.finished_at, r.id
LIMIT :limit;

-- name: archive_run_rows
SELECT * FROM workflow_runs WHERE id IN ({uuid_list[run_ids]}) ORDER BY id;

-- name: archive_task_rows
SELECT * FROM task_runs WHERE workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY workflow_run_id, id;

-- The dispatches of the runs' tasks, each with its run (``archived_run_id``).
-- name: archive_outbox_rows
SELECT o.dispatch_id, o.task_run_id, o.task_key, o.task_type, o.fencing_token,
       o.created_at, o.published_at, o.reason, t.workflow_run_id AS archived_run_id
FROM dispatch_outbox o JOIN task_runs t ON t.id = o.task_run_id
WHERE t.workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY o.created_at, o.dispatch_id;

-- name: archive_run_limit_rows
SELECT workflow_run_id, max_running, running, last_claim, last_claim_took
FROM run_limits WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: archive_held_rows
SELECT task_run_id, workflow_run_id, task_type, held_by, held_at
FROM held_dispatches WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- The events of some aggregates, in the log's order.
-- name: archive_events
SELECT originator_id, originator_version, topic, state
FROM {events_table} WHERE originator_id IN ({uuid_list[originator_ids]})
ORDER BY {event_order};

-- The delete's check, in its transaction: the runs still here and still ended, locked
-- (PostgreSQL; SQLite's one writer holds the database), with the version the archive
-- file must have; and how many events the runs' aggregates have now.
-- name: lock_runs_to_archive
SELECT id, version FROM workflow_runs
WHERE id IN ({uuid_list[run_ids]}) AND state IN ('succeeded', 'failed', 'cancelled')
ORDER BY id {for_update};

-- name: count_events_of
SELECT count(*) AS event_count FROM {events_table}
WHERE originator_id IN ({uuid_list[originator_ids]});

-- The deletes, children first (task_runs references workflow_runs).
-- name: archive_delete_events
DELETE FROM {events_table} WHERE originator_id IN ({uuid_list[originator_ids]});

-- name: archive_delete_outbox
DELETE FROM dispatch_outbox
WHERE task_run_id IN (SELECT id FROM task_runs WHERE workflow_run_id IN ({uuid_list[run_ids]}));

-- name: archive_delete_held
DELETE FROM held_dispatches WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: archive_delete_run_limits
DELETE FROM run_limits WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: archive_delete_wakeups
DELETE FROM run_wakeups WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: archive_delete_tasks
DELETE FROM task_runs WHERE workflow_run_id IN ({uuid_list[run_ids]});

-- name: archive_delete_runs
DELETE FROM workflow_runs WHERE id IN ({uuid_list[run_ids]});

-- name: insert_archived_run
INSERT INTO archived_runs (workflow_run_id, workflow_name, archive_file, archived_at,
                           event_count, task_count)
VALUES (:workflow_run_id, :workflow_name, :archive_file, {now}, :event_count, :task_count);

-- name: select_archived_run
SELECT * FROM archived_runs WHERE workflow_run_id = :workflow_run_id;

-- name: delete_archived_run
DELETE FROM archived_runs WHERE workflow_run_id = :workflow_run_id;

-- A restore puts each row back as it was archived, every column (the definition's brief
-- made anew from its definition, as insert_workflow_run makes it).
-- name: restore_workflow_run
INSERT INTO workflow_runs ({workflow_run_row_columns}, definition_brief)
VALUES ({workflow_run_row_values}, {definition_brief_of_parameter});

-- name: restore_task_run
INSERT INTO task_runs ({task_run_row_columns}) VALUES ({task_run_row_values});

-- name: restore_outbox_row
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at, published_at, reason)
VALUES (:dispatch_id, :task_run_id, :task_key, :task_type, :fencing_token,
        :created_at, :published_at, :reason);

-- name: restore_run_limit
INSERT INTO run_limits (workflow_run_id, max_running, running, last_claim, last_claim_took)
VALUES (:workflow_run_id, :max_running, :running, :last_claim, :last_claim_took);

-- name: restore_held_dispatch
INSERT INTO held_dispatches (task_run_id, workflow_run_id, task_type, held_by, held_at)
VALUES (:task_run_id, :workflow_run_id, :task_type, :held_by, :held_at);

-- `flowforge db stats`: the live database's size, and the archive files written.
-- name: stats_counts
SELECT (SELECT count(*) FROM {events_table}) AS events,
       (SELECT coalesce(sum(length(topic) + length(state)), 0) FROM {events_table})
           AS event_bytes,
       (SELECT count(*) FROM workflow_runs) AS workflow_runs,
       (SELECT count(*) FROM task_runs) AS task_runs,
       (SELECT count(*) FROM dispatch_outbox) AS dispatch_outbox,
       (SELECT count(*) FROM run_wakeups) AS run_wakeups,
       (SELECT count(*) FROM run_limits) AS run_limits,
       (SELECT count(*) FROM held_dispatches) AS held_dispatches,
       (SELECT count(*) FROM schedules) AS schedules,
       (SELECT count(*) FROM archived_runs) AS archived_runs;

-- name: stats_oldest_run
SELECT min(finished_at) AS finished_at FROM workflow_runs
WHERE state IN ('succeeded', 'failed', 'cancelled');

-- name: stats_archive_files
SELECT archive_file, count(*) AS runs, sum(event_count) AS event_count,
       sum(task_count) AS task_count, max(archived_at) AS archived_at
FROM archived_runs GROUP BY archive_file ORDER BY max(archived_at), archive_file;

-- An archived run by the start or end of its id as a user typed it (a short id): only
-- asked when no live run matches, so a scan of this table is fine.
-- name: select_archived_runs_like
SELECT * FROM archived_runs
WHERE CAST(workflow_run_id AS text) LIKE :starts OR CAST(workflow_run_id AS text) LIKE :ends
LIMIT 2;

-- The archive files that hold runs still archived (a task run's id is looked for in
-- their manifests: the table keeps runs, not their tasks).
-- name: select_archive_file_names
SELECT DISTINCT archive_file FROM archived_runs ORDER BY archive_file;

-- The idempotency keys live runs hold, of some keys (a restore leaves in its file a run
-- whose key a run started since its archive holds: the key names one run).
-- name: select_taken_idempotency_keys
SELECT idempotency_key FROM workflow_runs
WHERE idempotency_key IN ({text_list[idempotency_keys]});
