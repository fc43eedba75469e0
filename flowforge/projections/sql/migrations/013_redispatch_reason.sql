-- Migration 13: why a dispatch was redispatched (docs/delivery.md, "Redispatch"), so
-- that `flowforge why` can say it. NULL on the rows that exist: a transition's own
-- dispatch, or a redispatch of the older net, which recorded no reason.
ALTER TABLE dispatch_outbox ADD COLUMN reason text;
