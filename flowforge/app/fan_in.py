"""Which wide fan-ins still wait: a finish's advance without reading every dependency.

A finish's advance (``app/advance.py``, ``_step_changes``) reads the finished task's
dependents and their dependencies' rows, to promote a dependent whose dependencies have
all succeeded. A task that depends on 50,000 others made each of their finishes read
50,000 rows (and send their keys): a per-finish cost that grew with the fan-in, so
finishing them all cost its square (0.8 s a finish at 20,000, on PostgreSQL).

A dependent still waits if any one of its dependencies has not succeeded. A few of the
run's tasks not succeeded yet are read by the unfinished tasks' partial index (a bounded
read); a wide dependent that depends on one of them is known to wait, and neither it nor
its dependencies are read. Only when none of those few is among its dependencies (its
last dependencies finishing, or other tasks unfinished) is it judged from the rows, as
before. It is read in the advance's own transaction, under the run's lock, so a task
seen unfinished there is unfinished for the advance: the dependent cannot be due.
"""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.app import mapped
from flowforge.projections.reads import Reads

#: A dependent with more dependencies than this is a wide fan-in; as many tasks not
#: succeeded are read to find one it waits for.
WIDE = 64


def waiting_fan_ins(
    reads: Reads, run_id: UUID, dependents: Collection[str], definition: WorkflowDefinition
) -> set[str]:
    """The wide dependents (none of whose dependencies is a mapped task) that still wait
    for a dependency not succeeded yet; the others are not judged here."""
    wide = {
        key
        for key in dependents
        if len(definition.task(key).depends_on) > WIDE
        and not mapped.mapped_among(definition, definition.task(key).depends_on)
    }
    if not wide:
        return set()
    unfinished = reads.some_unfinished_task_keys(run_id, WIDE)
    return {key for key in wide if not unfinished.isdisjoint(definition.task(key).depends_on)}
