"""The runs a worker has met: each one's parsed definition and inputs, bounded.

A run's definition and inputs never change, so a worker reads them once per run (in the
claim's round trip) and keeps the most recent ones; a claim names the latest few as
known, so their definitions are not sent again. Parsed into the service's cache
(``caches.DefinitionCache``): the finish that advances the run finds it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.app.caches import DefinitionCache
from flowforge.app.results import WorkflowRunView
from flowforge.lru import Lru

#: How many runs' definitions and inputs a worker keeps in memory (at least its batch).
RUN_CACHE_SIZE = 256
#: The latest runs a worker names when it reads a task (their definitions are not sent
#: again); a run it knows beyond these is read once more, and remembered afresh.
KNOWN_RUNS_SENT = 8


@dataclass(frozen=True, slots=True)
class RunFacts:
    definition: WorkflowDefinition
    inputs: Mapping[str, Any]


class RunCache:
    """The most recent runs' facts, by run id; one worker's, used from its thread."""

    def __init__(self, definitions: DefinitionCache, size: int = RUN_CACHE_SIZE) -> None:
        self._definitions = definitions
        self._runs: Lru[UUID, RunFacts] = Lru(size)

    def latest(self) -> list[UUID]:
        """The runs a claim or read names as known (their definitions are not sent)."""
        return self._runs.latest(KNOWN_RUNS_SENT)

    def remember(self, run: WorkflowRunView) -> None:
        self._runs.put(run.id, RunFacts(self._definitions.of(run), run.inputs))

    def facts(self, run_id: UUID) -> RunFacts:
        """A run remembered since the worker took its task: the cache holds at least a
        batch's runs, so none of them has been dropped yet."""
        facts = self._runs.get(run_id)
        if facts is None:
            raise KeyError(run_id)
        return facts
