-- A placeholder on branch `limits` only: this number belongs to another part of issue
-- #33 (008 execution timeouts, 009 delayed start), built on its own branch. It keeps the
-- migrations numbered without gaps here; drop this file when the branches are merged.
SELECT 1;
