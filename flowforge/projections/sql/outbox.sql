-- The dispatch outbox's statements (a dispatch waiting to be published), for both
-- databases, with the macros of common.sql; flowforge.projections.statements loads them
-- with it.

-- name: insert_outbox
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
VALUES (:dispatch_id, :task_run_id, :task_key, :task_type, :fencing_token,
        coalesce(:created_at, {now}));

-- What a sweep publishes of each pending row: the row, and its run's trace context
-- (docs/observability.md, "Traces"), which the dispatch carries in its headers. Read
-- by primary keys in a subquery, not joined: the row lock ({for_update_skip_locked})
-- takes the outbox rows only, never a task row a worker is claiming. Only when the
-- publisher carries traces (:traced): the subquery was 40 % of the read's time
-- (docs/performance.md, "Per feature").
-- macro: pending_outbox
SELECT o.*, CASE WHEN :traced THEN
           (SELECT r.trace_context FROM task_runs t JOIN workflow_runs r
            ON r.id = t.workflow_run_id WHERE t.id = o.task_run_id) END AS trace_context
FROM dispatch_outbox o WHERE o.published_at IS NULL

-- Parallel publishers divide the pending rows (see {for_update_skip_locked}).
-- name: select_pending_outbox
{pending_outbox}
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- Only the dispatches of the task types a runner's workers have handlers for (the
-- embedded runner, ProcessGroup in flowforge/bootstrap.py): the others wait for theirs.
-- name: select_pending_outbox_of_types
{pending_outbox}
AND o.task_type IN ({text_list[task_types]})
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- Only the dispatches of some runs (a runner scoped to its own run: flowforge/app/
-- scope.py), found through their task rows. A semi-join, not a JOIN: the row lock
-- ({for_update_skip_locked}) then takes the outbox rows only, never a task row a
-- worker is claiming.
-- name: select_pending_outbox_of_runs
{pending_outbox}
AND o.task_run_id IN (SELECT id FROM task_runs WHERE workflow_run_id IN ({uuid_list[run_ids]}))
ORDER BY o.created_at LIMIT :limit {for_update_skip_locked};

-- A sweep's whole batch in one statement (one per row was most of a sweep's server time).
-- name: mark_outbox_published
UPDATE dispatch_outbox SET published_at = {now} WHERE dispatch_id IN ({uuid_list[dispatch_ids]});

-- name: select_outbox_of_task_run
SELECT * FROM dispatch_outbox WHERE task_run_id = :task_run_id ORDER BY created_at;

-- name: count_pending_outbox
SELECT count(*) AS pending FROM dispatch_outbox WHERE published_at IS NULL;

-- The metrics' backlog (flowforge/metrics.py): the pending dispatches and the oldest's
-- creation time. The unfinished tasks by state: postgres.sql and sqlite.sql (each
-- through the unfinished tasks' partial index, not the whole table).
-- name: outbox_backlog
SELECT count(*) AS pending, min(created_at) AS created_at, {now} AS db_now
FROM dispatch_outbox WHERE published_at IS NULL;

-- A redispatch (flowforge/app/redispatch.py): the same row as insert_outbox, with the
-- reason the net gave it a new dispatch (NULL on a transition's own dispatch).
-- name: insert_redispatch
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at, reason)
VALUES (:dispatch_id, :task_run_id, :task_key, :task_type, :fencing_token, :created_at,
        :reason);

-- The redispatch net's count, per task type: READY tasks whose every dispatch is
-- published, each of which should have a message in its type's queue. Only the types
-- that have a stalled task are asked about (the net's only candidates).
-- name: count_waiting_of_stalled_types
SELECT t.task_type, count(*) AS waiting FROM task_runs t
WHERE t.state = 'ready'
  AND NOT EXISTS (SELECT 1 FROM dispatch_outbox o
                  WHERE o.task_run_id = t.id AND o.published_at IS NULL)
  AND t.task_type IN (SELECT s.task_type FROM ({stalled_ready}) s)
GROUP BY t.task_type;

-- Ordered by id too: the net confirms a candidate on a later pass, so ties (tasks made
-- ready in one transaction) must come out in the same order every time.
-- name: select_stalled_ready_of_type
{stalled_ready}
  AND t.task_type = :task_type
ORDER BY t.updated_at, t.id LIMIT :limit;

-- name: select_stalled_ready_of_type_of_runs
{stalled_ready}
  AND t.task_type = :task_type AND t.workflow_run_id IN ({uuid_list[run_ids]})
ORDER BY t.updated_at, t.id LIMIT :limit;
