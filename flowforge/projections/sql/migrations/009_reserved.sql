-- Migration 9: a placeholder on the cron branch only, so that this branch's migration
-- 11 loads (the migrations are numbered without gaps). Another branch of issue #33 adds
-- the real migration 009; when merging, delete this file and keep that one.
SELECT 1;
