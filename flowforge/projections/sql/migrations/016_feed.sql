-- Migration 16: the feed (docs/feed.md). On PostgreSQL each event's row records the
-- transaction that wrote it, and an index serves the feed's order (postgres.sql, "the
-- feed", says why); SQLite's rowid order is already the commit order: nothing to do.
{record_feed_transactions};
