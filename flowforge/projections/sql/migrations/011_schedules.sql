-- Migration 11: cron schedules (`flowforge schedule`; docs/scheduling/cron.md). One row
-- per schedule, projected from its events (flowforge/aggregates/cron_schedule.py). A name
-- belongs to at most one schedule that is not deleted (a deleted name may be reused);
-- only an active schedule has a next fire time, and the schedulers find the due ones
-- through their index.
CREATE TABLE schedules (
    id {uuid} PRIMARY KEY,
    name text NOT NULL,
    cron text NOT NULL,
    timezone text NOT NULL,
    workflow_name text NOT NULL,
    definition {json} NOT NULL,
    inputs {json} NOT NULL,
    catch_up integer NOT NULL CONSTRAINT schedules_catch_up_non_negative CHECK (catch_up >= 0),
    state text NOT NULL CONSTRAINT schedules_state_enum CHECK (state IN ({schedule_states})),
    next_fire_at {timestamp},
    last_fire_at {timestamp},
    last_run_id {uuid},
    version {bigint} NOT NULL CONSTRAINT schedules_version_positive CHECK (version >= 1),
    created_at {timestamp} NOT NULL,
    updated_at {timestamp} NOT NULL,
    CONSTRAINT schedules_next_fire_iff_active
        CHECK ((state = 'active') = (next_fire_at IS NOT NULL))
);
CREATE UNIQUE INDEX schedules_live_name_unique ON schedules (name) WHERE state <> 'deleted';
CREATE INDEX schedules_next_fire_at_idx ON schedules (next_fire_at) WHERE state = 'active';
