-- Migration 18: dynamic fan-out (docs/workflows.md, "Mapping a task over a list"). An
-- element of a mapped task carries its index and its input element; NULL on every
-- other task run, and on the rows that exist (no run was mapped before).
ALTER TABLE task_runs ADD COLUMN map_index integer
    CONSTRAINT task_runs_map_index_non_negative CHECK (map_index >= 0);
ALTER TABLE task_runs ADD COLUMN map_item {json};
