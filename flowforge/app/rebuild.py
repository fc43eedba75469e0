"""The rebuild: the projected rows dropped and rebuilt from the log, in one transaction."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, cast
from uuid import UUID

from flowforge import errors
from flowforge.app.collector import collection_paused
from flowforge.app.event_store import EventStore
from flowforge.app.results import RebuildReport
from flowforge.projections.folding import Folded
from flowforge.projections.store import Store

log = logging.getLogger(__name__)

#: How long the rebuild keeps trying to take the tables' locks. Each try gives up its
#: place after a short wait (``Store.write(rebuild=True)``) rather than deadlock with a
#: write that holds one table and waits for the other; under load a few tries are usual.
LOCK_DEADLINE_SECONDS = 30.0
#: The longest pause between two tries (each pause is random, up to a doubling bound).
_MAX_PAUSE_SECONDS = 0.5


def rebuild_projections(
    store: Store,
    events: EventStore,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RebuildReport:
    """Delete the projected rows and rebuild them from the log, in one transaction.

    The log is read in pages and its runs' and tasks' rows folded in memory, each
    written once (``projections/folding.py``, ``writes/rebuild.py``); writers wait on
    the tables' lock meanwhile, so the rebuilt rows are exactly the log's. The outbox is not a
    projection (it is delivery state) and is kept. A try that lost its place to a
    writer wrote nothing and is made again, until ``LOCK_DEADLINE_SECONDS``.
    """
    deadline, bound = clock() + LOCK_DEADLINE_SECONDS, 0.01
    while True:
        try:
            return _rebuild_once(store, events)
        except errors.TransactionConflictError as exc:
            if clock() >= deadline:
                raise errors.TransactionConflictError(
                    f"the rebuild could not take the projected tables' locks within "
                    f"{LOCK_DEADLINE_SECONDS:.0f} s: writers kept them ({exc}); nothing "
                    f"was changed; stop the scheduler and workers, or try again"
                ) from exc
            log.debug("rebuild gave way to a writer; trying again", extra={"cause": str(exc)})
            sleep(random.uniform(0, bound))
            bound = min(bound * 2, _MAX_PAUSE_SECONDS)


def _rebuild_once(store: Store, events: EventStore) -> RebuildReport:
    folded, count = Folded(), 0
    to_domain_event = events.mapper.to_domain_event
    with collection_paused(), store.write(rebuild=True) as writes:
        writes.rebuild.delete_projections()
        for page in writes.rebuild.stored_event_pages():
            count += len(page)
            for record in page:
                event = to_domain_event(record)
                if not folded.fold(event):
                    # A schedule's or a limit's event: applied to its table at once.
                    writes.rebuild.apply(event)
        writes.rebuild.write_folded(folded)
        writes.rebuild.fill_missing_task_leases()
        writes.rebuild.recount_limits()
    return RebuildReport(events=count, workflow_runs=len(folded.runs), task_runs=len(folded.tasks))


def logged_aggregates(store: Store, events: EventStore) -> dict[UUID, Any]:
    """Every aggregate reconstituted from the log, by id: the whole log read once and
    folded in memory by the library's own mutator (``event.mutate``, what its
    projector function ``project_aggregate`` calls for each event of an aggregate the
    repository reads), where a repository read per row cost a round trip each. The
    rebuild's own fold (``projections/folding.py``) is not used: the check is
    independent of what it checks."""
    with store.read() as reads:
        stored = reads.every_stored_event()
    aggregates: dict[UUID, Any] = {}
    to_domain_event = events.mapper.to_domain_event
    with collection_paused():
        for record in stored:
            event = to_domain_event(record)
            key = UUID(str(event.originator_id))
            # The library's mutator, as its projector function calls it
            # (``project_aggregate``, less its per-event protocol check).
            aggregates[key] = cast(Any, event).mutate(aggregates.get(key))
    return aggregates
