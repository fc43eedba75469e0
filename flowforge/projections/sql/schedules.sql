-- The cron schedules' statements (docs/scheduling/cron.md), for both databases, with
-- the macros of common.sql; flowforge.projections.statements loads them with it.
--   {schedule_states}  the ScheduleState enum, for the CHECK
--   {schedule_assignments} {schedule_static_columns} {schedule_static_values}
--     the columns of the Schedule aggregate's declaration (flowforge/aggregates/cron_schedule.py)

-- A schedule's creation, on the write path and in the rebuild. No row when a schedule
-- that is not deleted has the name (schedules_live_name_unique): nothing is appended.
-- name: insert_schedule
INSERT INTO schedules (id, {schedule_static_columns}, state, next_fire_at, last_fire_at,
                       last_run_id, version, created_at, updated_at)
VALUES (:id, {schedule_static_values}, :state, :next_fire_at, NULL, NULL, :version,
        :created_at, :created_at)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: apply_schedule_event
UPDATE schedules
SET {schedule_assignments}, version = :version, updated_at = :updated_at
WHERE id = :id AND version = :version - 1 AND state = :source
RETURNING id;

-- name: delete_schedules
DELETE FROM schedules;

-- --- the conditional writes: ONE statement each, 0 rows means lost ---------------------

-- pause, resume, delete and delete_paused: the live schedule of that name, in the
-- edge's source state. The next fire time is the caller's: none for pause and the
-- deletes, the first after the database's clock for resume.
-- A delete's first statement: the live schedule's row, locked until the commit. On
-- PostgreSQL (READ COMMITTED) it waits for a pause or resume holding the row and then
-- reads the state that one committed, so the delete's edge (delete from active,
-- delete_paused from paused) is the one its conditional write will match.
-- name: lock_live_schedule
SELECT state FROM schedules WHERE name = :name AND state IN ('active', 'paused') {for_update};

-- name: schedule_move
UPDATE schedules
SET state = :target, next_fire_at = :next_fire_at,
    version = version + 1, updated_at = {touched_at}
WHERE name = :name AND state = :source
RETURNING *;

-- A fire: only while the schedule is active, still next fires at the time the caller
-- read (:due_at: another scheduler that fired it first moved it on), and that time has
-- come by the database's clock (or :as_of, a test's clock). Written in the transaction
-- that creates the fire's run, so the run exists iff this row moved.
-- name: schedule_fire
UPDATE schedules
SET next_fire_at = :next_fire_at, last_fire_at = :last_fire_at, last_run_id = :last_run_id,
    version = version + 1, updated_at = {touched_at}
WHERE id = :id AND state = 'active' AND next_fire_at = :due_at
    AND next_fire_at <= coalesce(:as_of, {now})
RETURNING *;

-- --- queries ---------------------------------------------------------------------------

-- name: select_schedule_by_name
SELECT * FROM schedules WHERE name = :name AND state <> 'deleted';

-- name: select_schedules
SELECT * FROM schedules WHERE state <> 'deleted' ORDER BY name;

-- The schedules due by the database's clock (or :as_of), the most overdue first.
-- name: select_due_schedules
SELECT * FROM schedules
WHERE state = 'active' AND next_fire_at <= coalesce(:as_of, {now})
ORDER BY next_fire_at LIMIT :limit;

-- When the next schedule falls due: the scheduler sleeps until then, not a whole interval.
-- name: select_next_fire
SELECT {now} AS db_now,
       (SELECT min(next_fire_at) FROM schedules WHERE state = 'active') AS next_fire_at;
