-- The feed: every event of the log, in an order no later commit can precede
-- (docs/feed.md has the guarantee and its proof sketch). The dialects' macros
-- (postgres.sql, sqlite.sql, "the feed"): {feed_transaction} the event's key (0 on
-- SQLite), {feed_after} "after the position :transaction_id, :notification_id",
-- {feed_below_horizon} "below the oldest transaction still running" (always, on
-- SQLite), {feed_from_start} "any event" (a range the index serves), {feed_task_run_id} the originator id as task_runs' id, {feed_order} and
-- {feed_order_desc} the feed's order (an integer in ORDER BY would name a column).

-- A page of the feed after a position, in (transaction, notification) order, only below
-- the horizon: nothing still running can commit an event before what this returns. A
-- task's event carries its run and key (its row; none once the row is gone).
-- name: feed_select
SELECT {feed_transaction} AS transaction_id, e.{event_order} AS notification_id,
       e.originator_id, e.originator_version, e.topic, e.state,
       t.workflow_run_id, t.task_key
FROM {events_table} e
LEFT JOIN task_runs t ON t.id = {feed_task_run_id}
WHERE {feed_after} AND {feed_below_horizon}
ORDER BY {feed_order}
LIMIT :limit;

-- Whether committed events wait above the horizon (a transaction that began before
-- theirs still runs): the follower looks again soon rather than at its next poll.
-- In the feed's order, so that the feed's index answers it however many events follow.
-- name: feed_held_back
SELECT 1 AS held FROM {events_table} e
WHERE {feed_after} AND NOT {feed_below_horizon}
ORDER BY {feed_order}
LIMIT 1;

-- The oldest event still in the log: a position before it was archived past.
-- name: feed_oldest
SELECT {feed_transaction} AS transaction_id, e.{event_order} AS notification_id
FROM {events_table} e
WHERE {feed_from_start}
ORDER BY {feed_order}
LIMIT 1;

-- The newest position below the horizon: where a follower that wants only what comes
-- next starts.
-- name: feed_head
SELECT {feed_transaction} AS transaction_id, e.{event_order} AS notification_id
FROM {events_table} e
WHERE {feed_below_horizon}
ORDER BY {feed_order_desc}
LIMIT 1;

-- Where `flowforge db archive` wrote the runs it archived (docs/operations.md).
-- name: feed_archive_locations
SELECT DISTINCT archive_file FROM archived_runs ORDER BY archive_file LIMIT 5;
