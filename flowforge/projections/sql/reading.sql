-- The reads a person makes of one run, at any size (issue #50): each costs what its
-- answer needs, not what the run holds. `flowforge status` (a summary of counts and the
-- tasks a user acts on, or pages of tasks), `flowforge history` (the run's events in the
-- log's order, page after page), `flowforge why` (one task, its dependencies, the run's
-- failures) and the web UI read through these.

-- A run's tasks counted by state: one pass over the run's entries of the unique index
-- (workflow_run_id, task_key), no row sent back per task.
-- name: select_task_state_counts
SELECT state, count(*) AS tasks FROM task_runs
WHERE workflow_run_id = :workflow_run_id GROUP BY state;

-- The elements of a run's mapped tasks (map_over) counted by mapped task and state: the
-- mapped task's key is the element's key before its "[" (``process[3]``, or with a
-- map_key ``process[a.csv]``); a failed element
-- with attempts left counts as retrying (its retry is on its way: mapping.shown_state).
-- One pass over the run's entries of the unique index, as the counts by state.
-- name: select_mapped_task_counts
SELECT {mapped_task_of_key} AS mapped_task,
       CASE WHEN state = 'failed' AND attempt < max_attempts THEN 'retrying' ELSE state END
           AS state,
       count(*) AS tasks
FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND map_index IS NOT NULL
GROUP BY 1, 2;

-- The tasks of a run in one state that waited (or ran) the longest: the oldest update
-- first. For the unfinished states and failed, the partial index task_runs_unfinished_idx
-- holds only the run's unfinished tasks; a finished run has none.
-- name: select_task_runs_in_state
SELECT * FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND state = :state
ORDER BY updated_at, task_key LIMIT :limit;

-- A page of a run's tasks in key order, after the key :after ('' for the first page),
-- in one state or all (:state NULL): the unique index (workflow_run_id, task_key) serves
-- both the order and the start, so page 1,000 costs what page 1 does.
-- name: select_task_runs_page
SELECT * FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND task_key > :after
  AND (CAST(:state AS text) IS NULL OR state = CAST(:state AS text))
ORDER BY task_key LIMIT :limit;

-- How many events a run's audit log holds, without reading one: each aggregate's version
-- is the number of its events (the run's own are added by the caller).
-- name: select_task_event_count
SELECT coalesce(sum(version), 0) AS events FROM task_runs
WHERE workflow_run_id = :workflow_run_id;

-- Where a run's audit log starts: its creation event's position in the log (its tasks
-- are created in the same transaction, after it; nothing of the run comes before it),
-- and the actor it names, read by the server (the event holds the whole definition:
-- megabytes a client would decode to show one line).
-- name: select_run_creation
SELECT {event_order} AS position, {actor_of_event} AS actor FROM {events_table}
WHERE originator_id = :originator_id AND originator_version = 1;

-- A page of a run's audit log in the log's order, after the position :after: the run's
-- own events and its tasks'. The log's order index serves the order and the start; each
-- event is kept if it is the run's or one of its tasks' (a primary-key probe of
-- task_runs), so the first page comes back at once and each page costs its own rows.
-- name: select_run_events_page
SELECT e.{event_order} AS position, e.originator_id, e.originator_version, e.topic, e.state
FROM {events_table} AS e
WHERE e.{event_order} > :after
  AND (e.originator_id = :originator_id
       OR EXISTS (SELECT 1 FROM task_runs AS t
                  WHERE t.id = {task_id_of_event} AND t.workflow_run_id = :workflow_run_id))
ORDER BY e.{event_order} LIMIT :limit;

-- A run's row with its definition's tasks left out: what a read that names the run,
-- not its tasks, needs (the workflow's name, its on_failure, ...). A 50,000-task run's
-- definition is megabytes of JSON; decoding it was most of `why`'s time, and even the
-- server's parse of it grew with the run: the row keeps it without its tasks
-- (definition_brief, filled by insert_workflow_run; rows of before migration 17 filled
-- by it).
-- name: select_workflow_run_brief
SELECT {workflow_run_columns_but_definition},
       coalesce(definition_brief, {definition_without_tasks}) AS definition
FROM workflow_runs WHERE id = :id;

-- The ids of the most recent runs: what a partial id is matched against.
-- name: select_recent_run_ids
SELECT id FROM workflow_runs ORDER BY created_at DESC, id LIMIT :limit;

-- A run's own events from a version on (2: all but its creation, whose state holds the
-- whole definition), in version order.
-- name: select_stored_events_from_version
SELECT originator_id, originator_version, topic, state FROM {events_table}
WHERE originator_id = :originator_id AND originator_version >= :version
ORDER BY originator_version;

-- Each task of a run in outline: what a large run's web page counts and colours of every
-- task (its state and attempt), none of the other columns (decoding its ids, times and
-- JSON was most of the page's time); with :as_of, only the tasks changed at or after it
-- (a live page's patch).
-- name: select_task_outline
SELECT task_key, state, attempt FROM task_runs
WHERE workflow_run_id = :workflow_run_id
  AND (CAST(:as_of AS {timestamp}) IS NULL OR updated_at >= :as_of);

-- The tasks of a run first claimed by :as_of (NULL: by now), the first first: a large
-- run's timeline rows. A top-N sort of the run's rows, no row sent back but those.
-- name: select_task_runs_first_claimed
SELECT * FROM task_runs
WHERE workflow_run_id = :workflow_run_id AND started_at IS NOT NULL
  AND (CAST(:as_of AS {timestamp}) IS NULL OR started_at <= :as_of)
ORDER BY started_at, task_key LIMIT :limit;

-- Each task of a run changed after :as_of, with its state and attempt then: its last
-- event at or before :as_of, found by its events' primary key (originator_id, version)
-- from its newest down, each event's time read from the head of its JSON (where both
-- the library's transcoder and the SQL-built events put it). A task created after
-- :as_of has no such event (NULL). Costs the changed tasks' newest events, never a
-- replay of the run's log, and sends back one short line a task ("state attempt").
-- name: select_task_states_as_of
SELECT t.task_key, (
    SELECT {state_and_attempt_of_event} FROM {events_table} AS e
    WHERE e.originator_id = {event_id_of_task} AND {event_at_or_before}
    ORDER BY e.originator_version DESC LIMIT 1) AS state_then
FROM task_runs AS t
WHERE t.workflow_run_id = :workflow_run_id AND t.updated_at > :as_of;
