-- Migration 12: traces (docs/observability.md, "Traces"). A run stores the OpenTelemetry
-- context of its creation, which its tasks' dispatches carry. NULL on the rows that
-- exist, and wherever no tracer records: their dispatches carry no context.
ALTER TABLE workflow_runs ADD COLUMN trace_context {json};
