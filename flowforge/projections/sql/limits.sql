-- The concurrency limits' statements (docs/scheduling/limits.md), for both databases,
-- with the macros of common.sql; flowforge.projections.statements loads them with it.
-- The dialect-specific parts (freeing a task's slots in a transition's own statement)
-- are in postgres.sql and sqlite.sql.

-- A counter row per limited task type and per limited run: ``running`` is how many of
-- its tasks hold a slot (are running since a claim that counted), kept by the claims'
-- and the finishes' conditional writes. ``last_claim`` / ``last_claim_took``: the last
-- limited claim that locked the row, and whether it took a slot (a claim reads back its
-- own decision by its :claim token: RETURNING shows only the new row, and a decision
-- made after waiting for another writer is made on that writer's row, not on the one
-- the statement first read). Counter rows are never deleted while they count
-- (delete_idle_type_counter: a removed limit's, once it counts nothing).
-- macro: create_limit_tables
CREATE TABLE task_type_limits (
    task_type text PRIMARY KEY,
    max_running integer CONSTRAINT task_type_limits_max_running_positive
        CHECK (max_running >= 1),
    running integer NOT NULL CONSTRAINT task_type_limits_running_non_negative
        CHECK (running >= 0),
    last_claim text,
    last_claim_took boolean NOT NULL DEFAULT false,
    version {bigint} NOT NULL CONSTRAINT task_type_limits_version_non_negative
        CHECK (version >= 0),
    changed_at {timestamp},
    changed_by text
);
CREATE TABLE run_limits (
    workflow_run_id {uuid} PRIMARY KEY,
    max_running integer NOT NULL CONSTRAINT run_limits_max_running_positive
        CHECK (max_running >= 1),
    running integer NOT NULL CONSTRAINT run_limits_running_non_negative CHECK (running >= 0),
    last_claim text,
    last_claim_took boolean NOT NULL DEFAULT false
);
CREATE TABLE held_dispatches (
    task_run_id {uuid} PRIMARY KEY,
    workflow_run_id {uuid} NOT NULL,
    task_type text NOT NULL,
    held_by text NOT NULL CONSTRAINT held_dispatches_held_by_enum
        CHECK (held_by IN ('type', 'run')),
    held_at {timestamp} NOT NULL
);
CREATE INDEX held_dispatches_type_idx ON held_dispatches (task_type, held_at);
CREATE INDEX held_dispatches_run_idx ON held_dispatches (workflow_run_id, held_at)

-- The type limit of a claim of task :id: the smallest of the operator's limit (the
-- counter row's max_running, in scope) and the task's own; no limit is a huge one.
-- macro: type_limit_of_claim
coalesce(
    CASE WHEN max_running IS NULL
              OR (SELECT max_running FROM task_runs WHERE id = :id) < max_running
         THEN (SELECT max_running FROM task_runs WHERE id = :id)
         ELSE max_running END,
    2147483647)

-- This claim's decision on a counter row in scope: it took a slot / it was refused.
-- macro: took_here
(last_claim = :claim AND last_claim_took)

-- macro: refused_here
(last_claim = :claim AND NOT last_claim_took)

-- The task :id is running by a claim of this transaction (PostgreSQL: its row version
-- is this transaction's; SQLite: a single writer, so a task that took a slot here and
-- is running was claimed here).
-- macro: claimed_here
EXISTS (SELECT 1 FROM task_runs WHERE id = :id AND state = 'running'
        AND {written_by_this_transaction})

-- The task :task_run_id left running in this transaction: its slot is free. Checked
-- in SQL so that a batch can send it before it knows which finish won (leaves.py).
-- macro: freed_here
EXISTS (SELECT 1 FROM task_runs WHERE id = :task_run_id AND state <> 'running'
        AND {written_by_this_transaction})

-- A hold not yet answered by a dispatch: none made since it was held.
-- macro: unreleased
NOT EXISTS (SELECT 1 FROM dispatch_outbox o
            WHERE o.task_run_id = h.task_run_id AND o.created_at >= h.held_at)

-- The claim of a limited task (LimitWrites.claim), its statements in this order, in
-- one round trip. The task's row first, locked: every writer takes task rows (in id
-- order) before counter rows, so a claim never holds a counter row that a finish or an
-- advance holding this task's row waits for (docs/scheduling/limits.md, "Deadlocks").
-- Then the run's counter row, then the type's (the order every writer takes them in),
-- each ONE conditional write that takes a slot when there is room and otherwise keeps
-- the row as it is, locked either way until the commit.
-- name: lock_ready_task_for_claim
SELECT id FROM task_runs WHERE id = :id AND state = 'ready' {for_update};

-- name: take_run_slot
UPDATE run_limits
SET running = running + CASE WHEN running < max_running THEN 1 ELSE 0 END,
    last_claim = :claim, last_claim_took = (running < max_running)
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id AND state = 'ready')
RETURNING running, max_running, last_claim_took;

-- Not tried when the run refused: the type's row is left alone.
-- name: take_type_slot
UPDATE task_type_limits
SET running = running + CASE WHEN running < {type_limit_of_claim} THEN 1 ELSE 0 END,
    last_claim = :claim, last_claim_took = (running < {type_limit_of_claim})
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id AND state = 'ready')
  AND NOT EXISTS (
      SELECT 1 FROM run_limits
      WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
        AND {refused_here})
RETURNING running, {type_limit_of_claim} AS max_running, last_claim_took;

-- task_claim, only if this claim took a slot of every limit the task has.
-- name: task_claim_limited
UPDATE task_runs
{claim_assignments}
WHERE id = :id AND state = :source AND coalesce(:lease_seconds, lease_seconds) IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM task_type_limits
                  WHERE task_type = task_runs.task_type AND NOT coalesce({took_here}, false))
  AND NOT EXISTS (SELECT 1 FROM run_limits
                  WHERE workflow_run_id = task_runs.workflow_run_id
                    AND NOT coalesce({took_here}, false))
RETURNING *;

-- A slot taken for a claim that then lost (another worker claimed the task first, or
-- the other limit refused) is given back in the same transaction. Its mark stays as it
-- was (took), so that hold_dispatch names the limit that refused, not this one.
-- name: return_run_slot
UPDATE run_limits SET running = running - 1
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
  AND {took_here} AND NOT {claimed_here}
RETURNING running;

-- name: return_type_slot
UPDATE task_type_limits SET running = running - 1
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id)
  AND {took_here} AND NOT {claimed_here}
RETURNING running;

-- A refused claim holds the task's dispatch, written while this transaction holds the
-- refusing counter row: a finish that frees a slot of it waits for that row, so it
-- commits after this hold and sees it (the race argument: docs/scheduling/limits.md).
-- name: hold_dispatch
INSERT INTO held_dispatches (task_run_id, workflow_run_id, task_type, held_by, held_at)
SELECT id, workflow_run_id, task_type,
       CASE WHEN EXISTS (SELECT 1 FROM run_limits
                         WHERE workflow_run_id = task_runs.workflow_run_id AND {refused_here})
            THEN 'run' ELSE 'type' END,
       {now}
FROM task_runs
WHERE id = :id AND state = 'ready'
  AND (EXISTS (SELECT 1 FROM run_limits
               WHERE workflow_run_id = task_runs.workflow_run_id AND {refused_here})
       OR EXISTS (SELECT 1 FROM task_type_limits
                  WHERE task_type = task_runs.task_type AND {refused_here}))
ON CONFLICT (task_run_id) DO UPDATE SET held_by = excluded.held_by, held_at = excluded.held_at
RETURNING held_by;

-- name: unhold_claimed
DELETE FROM held_dispatches WHERE task_run_id = :id AND {claimed_here};

-- A task cancelled while ready (cancel_ready, the only other edge out of ready) leaves
-- no hold behind, in the cancel's transaction.
-- name: drop_hold
DELETE FROM held_dispatches WHERE task_run_id = :task_run_id;

-- Last: the claim's marks cleared, so a counter row holds nothing of one claim after
-- its transaction (and is what a rebuild makes of it).
-- name: clear_run_claim_mark
UPDATE run_limits SET last_claim = NULL, last_claim_took = false
WHERE workflow_run_id = (SELECT workflow_run_id FROM task_runs WHERE id = :id)
  AND last_claim = :claim;

-- name: clear_type_claim_mark
UPDATE task_type_limits SET last_claim = NULL, last_claim_took = false
WHERE task_type = (SELECT task_type FROM task_runs WHERE id = :id) AND last_claim = :claim;

-- A task that left running (finish, cancel, reap) frees its slots: its run's, then its
-- type's (the claims' order), then dispatches the oldest still-ready task each freed
-- limit holds, in a statement of its own: its snapshot is taken after the counter rows'
-- locks were granted, so it sees a hold that a refusal holding them committed.
-- name: free_run_slot
UPDATE run_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
WHERE workflow_run_id = :workflow_run_id AND {freed_here};

-- name: free_type_slot
UPDATE task_type_limits SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END
WHERE task_type = :task_type AND {freed_here};

-- name: release_held_dispatches
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
SELECT {random_uuid}, t.id, t.task_key, t.task_type, t.fencing_token,
       CASE WHEN h.held_at > {now} THEN h.held_at ELSE {now} END
FROM held_dispatches h JOIN task_runs t ON t.id = h.task_run_id
WHERE {freed_here} AND h.task_run_id IN (
    SELECT task_run_id FROM (
        SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
        WHERE h.task_type = :task_type AND h.held_by = 'type' AND r.state = 'ready'
          AND {unreleased}
        ORDER BY h.held_at, h.task_run_id LIMIT 1) AS oldest_of_type
    UNION
    SELECT task_run_id FROM (
        SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
        WHERE h.workflow_run_id = :workflow_run_id AND h.held_by = 'run'
          AND r.state = 'ready' AND {unreleased}
        ORDER BY h.held_at, h.task_run_id LIMIT 1) AS oldest_of_run)
RETURNING task_run_id;

-- A raised or removed limit: up to :limit of the type's held tasks dispatched again.
-- name: release_held_of_type
INSERT INTO dispatch_outbox (dispatch_id, task_run_id, task_key, task_type, fencing_token,
                             created_at)
SELECT {random_uuid}, t.id, t.task_key, t.task_type, t.fencing_token,
       CASE WHEN h.held_at > {now} THEN h.held_at ELSE {now} END
FROM held_dispatches h JOIN task_runs t ON t.id = h.task_run_id
WHERE h.task_run_id IN (
    SELECT h.task_run_id FROM held_dispatches h JOIN task_runs r ON r.id = h.task_run_id
    WHERE h.task_type = :task_type AND h.held_by = 'type' AND r.state = 'ready'
      AND {unreleased}
    ORDER BY h.held_at, h.task_run_id LIMIT :limit)
RETURNING task_run_id;

-- The operator's change of a type's limit (TaskTypeLimit's event at :version), under
-- lock_task_runs_for_limit: a new counter row counts the type's running tasks exactly.
-- name: change_task_type_limit
INSERT INTO task_type_limits (task_type, max_running, running, version, changed_at,
                              changed_by)
VALUES (:task_type, :max_running,
        (SELECT count(*) FROM task_runs WHERE task_type = :task_type AND state = 'running'),
        :version, :changed_at, :changed_by)
ON CONFLICT (task_type) DO UPDATE
SET max_running = excluded.max_running, version = excluded.version,
    changed_at = excluded.changed_at, changed_by = excluded.changed_by
WHERE task_type_limits.version = excluded.version - 1
RETURNING *;

-- A counter row for a type that a definition's task limits, if it has none yet (also
-- under lock_task_runs_for_limit), at its TaskTypeLimit's version in the log (0: none;
-- more after a limit was set, then unset and its counter deleted).
-- name: ensure_task_type_counter
INSERT INTO task_type_limits (task_type, max_running, running, version)
VALUES (:task_type, NULL,
        (SELECT count(*) FROM task_runs WHERE task_type = :task_type AND state = 'running'),
        :version)
ON CONFLICT (task_type) DO NOTHING;

-- The version of a type's TaskTypeLimit in the log, for a type with no counter row: a
-- deleted counter's next change continues its aggregate's versions.
-- name: select_limit_log_version
SELECT coalesce(max(originator_version), 0) AS version FROM {events_table}
WHERE originator_id = :originator_id;

-- A removed limit's counter row that counts nothing any more is deleted, in the
-- removal's transaction (under lock_task_runs_for_limit: no claim and no submission in
-- flight): no limit of the operator's, nothing running under it, no held dispatch of
-- the type, and no unfinished task of the type with a limit of its own. The type's
-- claims then take the fast path again (task_claim: no counter row).
-- name: delete_idle_type_counter
DELETE FROM task_type_limits
WHERE task_type = :task_type AND max_running IS NULL AND running = 0
  AND NOT EXISTS (SELECT 1 FROM held_dispatches WHERE task_type = :task_type)
  AND NOT EXISTS (SELECT 1 FROM task_runs
                  WHERE task_type = :task_type AND state IN ({unfinished_task_states})
                    AND max_running IS NOT NULL)
RETURNING task_type;

-- name: insert_run_limit
INSERT INTO run_limits (workflow_run_id, max_running, running) VALUES (:workflow_run_id,
    :max_running, 0);

-- name: select_task_type_limit
SELECT * FROM task_type_limits WHERE task_type = :task_type;

-- name: select_task_type_limits
SELECT * FROM task_type_limits ORDER BY task_type;

-- name: select_run_limit
SELECT * FROM run_limits WHERE workflow_run_id = :workflow_run_id;

-- name: select_held_dispatch
SELECT * FROM held_dispatches WHERE task_run_id = :task_run_id;

-- The rebuild: limits are projected again from the log and their counters recounted
-- from the rebuilt task rows (held dispatches are delivery state, like the outbox: kept).
-- name: delete_limits
DELETE FROM task_type_limits;

-- name: delete_run_limits
DELETE FROM run_limits;

-- name: insert_task_type_limit_counters
INSERT INTO task_type_limits (task_type, max_running, running, version)
SELECT DISTINCT task_type, CAST(NULL AS integer), 0, 0 FROM task_runs
WHERE max_running IS NOT NULL
ON CONFLICT (task_type) DO NOTHING;

-- name: recount_task_type_limits
UPDATE task_type_limits SET running = (
    SELECT count(*) FROM task_runs
    WHERE task_runs.task_type = task_type_limits.task_type AND state = 'running');

-- name: recount_run_limits
UPDATE run_limits SET running = (
    SELECT count(*) FROM task_runs
    WHERE task_runs.workflow_run_id = run_limits.workflow_run_id AND state = 'running');
