"""A mapped task's elements, created by its upstream's success (``app/mapped.py``,
through ``TaskWrites.create_many``).

On PostgreSQL every element's row, creation event and dispatch go in ONE statement
(``insert_mapped_elements``, postgres.sql); elsewhere each is created as any task is
(``TaskWrites.create``). The events are the library's, encoded by its mapper: the
rebuild and ``repository.get`` read them as they read a run's creation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from flowforge.aggregates.task_run import TaskRun
from flowforge.projections import projector
from flowforge.projections.writes.outbox import OutboxWrites
from flowforge.projections.writes.recording import Recording, machine_and_edge


def create_elements(
    recording: Recording,
    outbox: OutboxWrites,
    create: Callable[[TaskRun.Created], None],
    events: Sequence[TaskRun.Created],
) -> None:
    """The elements' rows, events and dispatches: two or more on PostgreSQL (the events
    written in SQL) in one statement, on SQLite in one statement run for all rows, one
    for all events and one for all dispatches (``defer_many``); else ``create``
    (``TaskWrites.create``) each."""
    if len(events) < 2 or events[0].timestamp == projector.TRANSACTION_NOW:
        for event in events:
            create(event)
    elif recording.events_in_sql:
        insert_in_one_statement(recording, events)
        outbox.enqueued = True
    else:
        rows = [projector.task_created_params(event) for event in events]
        recording.tx.defer_many("insert_task_run", rows)
        recording.append_timed(events)
        ready = [(e.originator_id, e.task_key, e.task_type) for e in events]
        outbox.enqueue_many(ready, at=events[0].timestamp)


def insert_in_one_statement(recording: Recording, events: Sequence[TaskRun.Created]) -> None:
    """Write ``events`` (ready elements of one run, sharing every fixed field but the
    key, index and item, and one time that is not ``TRANSACTION_NOW``) in one
    statement, sent with the rest of the transaction."""
    first = events[0]
    stored = [recording.mapper.to_stored_event(event) for event in events]
    params: dict[str, Any] = {
        "workflow_run_id": first.workflow_run_id,
        "task_type": first.task_type,
        "element_depends_on": json.dumps(first.depends_on),
        "max_attempts": first.max_attempts,
        "lease_seconds": first.lease_seconds,
        "timeout_seconds": first.timeout_seconds,
        "max_running": first.max_running,
        "max_worker_losses": first.max_worker_losses,
        "created_at": projector.row_time(first.timestamp),
        "element_ids": [event.originator_id for event in events],
        "element_keys": [event.task_key for event in events],
        "element_indexes": [event.map_index for event in events],
        "element_items": [json.dumps(event.map_item) for event in events],
        "topic": stored[0].topic,
        "element_states": [s.state for s in stored],
    }
    recording.tx.defer("insert_mapped_elements", params)
    recording.taken.extend([machine_and_edge(TaskRun.Created)] * len(events))
