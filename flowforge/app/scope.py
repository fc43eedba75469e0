"""Which runs a process acts on: the one idea behind an embedded runner's reach.

A deployment's scheduler, publisher and reaper act on every run (no scope). An embedded
runner (``flowforge run``, ``bootstrap.ProcessGroup``) shares its database with other
runs, of other programs or of earlier `run`s, and must leave those exactly as they are:
its scheduler advances, its reaper reclaims, its publisher sends and its start-up
redispatch re-sends only what its :class:`Scope` takes in. One object carries that
decision to all four, so they cannot disagree about which runs are the runner's.

A scope has two facets, either or both:

- ``runs``: these runs and no other (``flowforge run``'s default: its own run). Every
  statement that picks work filters by it in SQL (``..._of_runs`` in ``common.sql``), so
  another run gets no event, no outbox row and no attempt from this runner.
- ``task_types``: only runs whose every task type is in it (the handlers this runner
  has: ``flowforge run --all``). The scheduler checks a run against it from the run's
  definition; the publisher sends only dispatches of these types.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class Scope:
    """The runs a process acts on; ``None`` in a facet means no limit by it."""

    #: These runs only.
    runs: frozenset[UUID] | None = None
    #: Only runs whose every task type is one of these.
    task_types: frozenset[str] | None = None

    @classmethod
    def of_runs(cls, run_ids: Iterable[UUID], task_types: Iterable[str] | None = None) -> Scope:
        return cls(frozenset(run_ids), None if task_types is None else frozenset(task_types))

    @classmethod
    def of_task_types(cls, task_types: Iterable[str]) -> Scope:
        return cls(None, frozenset(task_types))

    def covers(self, run_id: UUID, task_types_of: Callable[[UUID], Collection[str]]) -> bool:
        """Whether the run is in this scope. ``task_types_of`` gives a run's task types
        (a read of its definition): asked only when this scope limits task types and
        the run is not already ruled out by id."""
        if self.runs is not None and run_id not in self.runs:
            return False
        if self.task_types is None:
            return True
        return all(task_type in self.task_types for task_type in task_types_of(run_id))

    @property
    def run_ids(self) -> list[UUID] | None:
        """The runs as a sorted list for a statement's parameter (None: any run)."""
        return None if self.runs is None else sorted(self.runs)


#: A scope that limits nothing: a deployment's processes.
EVERY_RUN = Scope()
