"""The rebuild: the projected rows dropped and rebuilt from the log, in one transaction."""

from __future__ import annotations

from flowforge.app.event_store import EventStore
from flowforge.app.results import RebuildReport
from flowforge.projections.store import Store


def rebuild_projections(store: Store, events: EventStore) -> RebuildReport:
    """Delete the projected rows and rebuild them from the log, in one transaction.

    Uses the same apply function as the write path; writers wait on the tables' lock
    meanwhile, so the rebuilt rows are exactly the log's. The outbox is not a
    projection (it is delivery state) and is kept.
    """
    with store.write(rebuild=True) as writes:
        stored = writes.stored_events()
        writes.delete_projections()
        for record in stored:
            writes.apply(events.mapper.to_domain_event(record))
        writes.fill_missing_task_leases()
    runs = sum(1 for s in stored if s.topic.endswith("WorkflowRun.Created"))
    tasks = sum(1 for s in stored if s.topic.endswith("TaskRun.Created"))
    return RebuildReport(events=len(stored), workflow_runs=runs, task_runs=tasks)
