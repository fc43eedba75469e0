"""This process's caches of what the database already said, bounded: a run's parsed
definition (it never changes), and the rows of the tasks this process claimed."""

from __future__ import annotations

import threading
from uuid import UUID

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.app.results import WorkflowRunView
from flowforge.lru import Lru
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow


class DefinitionCache:
    """Parsed definitions by run id, bounded (a run's definition never changes), so an
    advance does not re-parse an N-task definition each time its run is woken."""

    def __init__(self, size: int = 1024) -> None:
        self._parsed: Lru[UUID, WorkflowDefinition] = Lru(size)
        self._lock = threading.Lock()

    def cached(self, run_id: UUID) -> WorkflowDefinition | None:
        with self._lock:
            return self._parsed.peek(run_id)

    def of(self, run: WorkflowRunRow | WorkflowRunView) -> WorkflowDefinition:
        with self._lock:
            parsed = self._parsed.get(run.id)
        if parsed is not None:
            return parsed
        parsed = WorkflowDefinition.model_validate(run.definition)
        with self._lock:
            self._parsed.put(run.id, parsed)
        return parsed


class ClaimCache:
    """The rows of the tasks this process claimed and has not finished yet, by id and
    fencing token, bounded: a finish then knows its task's run and key without a read
    (``advance.leaf_of``). A finish whose claim is not here (another process claimed it, or it
    fell out) takes the general path."""

    def __init__(self, size: int = 4096) -> None:
        self._claimed: Lru[tuple[UUID, int], TaskRunRow] = Lru(size)
        self._lock = threading.Lock()

    def remember(self, row: TaskRunRow) -> None:
        with self._lock:
            self._claimed.put((row.id, row.fencing_token), row)

    def take(self, task_run_id: UUID, fencing_token: int) -> TaskRunRow | None:
        with self._lock:
            return self._claimed.pop((task_run_id, fencing_token))
