-- Migration 8 belongs to the execution timeouts (issue #33, another branch). This file
-- only keeps the numbering without gaps on the delayed-start branch, whose migration is
-- 9: delete it when the timeouts' 008 is merged. It changes nothing.
SELECT 1;
