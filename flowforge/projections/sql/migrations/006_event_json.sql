-- Migration 6: the function that escapes user JSON in an event PostgreSQL builds itself,
-- in the statement of its transition (projections/event_sql.py). Nothing else changes.
{create_event_json_function};
