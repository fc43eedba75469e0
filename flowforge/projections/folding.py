"""The rebuild's fold: the log's run and task events folded in memory into the rows they
project to, each row written once at the end (``writes/rebuild.py``), where applying
every event to its row cost a statement per event.

The fold checks what the per-event statements checked: each transition's edge is its
class's (``check_replayable``), and it follows its row, at the previous version and in
its source state (else ``CorruptEventLogError``, the same words as ``projector``'s). A
row is what ``insert_task_run``/``insert_workflow_run`` and then each
``apply_*_event`` would have left: the creation's fixed fields and the machine's
initial values, then every later event's carried fields, version and time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from flowforge import errors
from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.base import Declaration
from flowforge.aggregates.machines import WORKFLOW_RUN_MACHINE
from flowforge.aggregates.task_run import TaskRun
from flowforge.aggregates.workflow_run import WorkflowRun
from flowforge.projections import projector
from flowforge.projections.db.protocols import Row


@dataclass(slots=True)
class Folded:
    """The rows the log's runs and tasks project to, in order of creation, and the
    run limits' counter rows."""

    runs: dict[UUID, Row] = field(default_factory=dict)
    tasks: dict[UUID, Row] = field(default_factory=dict)
    run_limits: list[Row] = field(default_factory=list)
    #: The idempotency keys taken (a second run with one is not projected).
    keys: set[str] = field(default_factory=set)

    def fold(self, event: DomainEventProtocol[UUID]) -> bool:
        """Fold ``event`` into its row; False if it is no run's or task's event (the
        caller applies it to its table itself)."""
        if isinstance(event, TaskRun.Transitioned):
            task_run.check_replayable(event)
            _follow(self.tasks.get(event.originator_id), event, _TASK)
            return True
        if isinstance(event, TaskRun.Created):
            self.tasks[event.originator_id] = _created(event, _TASK, event.state)
            return True
        if isinstance(event, WorkflowRun.Transitioned):
            workflow_run.check_replayable(event)
            _follow(self.runs.get(event.originator_id), event, _RUN)
            return True
        if isinstance(event, WorkflowRun.Created):
            self._create_run(event)
            return True
        return False

    def _create_run(self, event: WorkflowRun.Created) -> None:
        # As insert_workflow_run's ON CONFLICT: a key another run has makes no row (the
        # write path never logs such a run, so its later events then find no row).
        key = event.idempotency_key
        if key is not None:
            if key in self.keys:
                return
            self.keys.add(key)
        state = WORKFLOW_RUN_MACHINE.initial.value
        self.runs[event.originator_id] = _created(event, _RUN, state)
        limit = event.definition.get("max_running_tasks")
        if limit is not None:
            self.run_limits.append({"workflow_run_id": event.originator_id, "max_running": limit})


@dataclass(frozen=True, slots=True)
class _Shape:
    """What folding needs of a declaration, computed once (its properties compute
    theirs at every call): the fixed fields, the changing ones with their initial
    values (``Declaration.carried``'s fallback for an event stored before a field)."""

    static: tuple[str, ...]
    initial: Row
    carried: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, declaration: Declaration) -> _Shape:
        mutable = [f for f in declaration.fields if f.mutable]
        return cls(
            declaration.static,
            declaration.initial(),
            tuple((f.name, f.initial) for f in mutable),
        )


_TASK = _Shape.of(task_run.DECLARATION)
_RUN = _Shape.of(workflow_run.DECLARATION)


def _created(event: Any, shape: _Shape, state: str) -> Row:
    # A creation event stored before a field was declared lacks it: NULL in the row.
    stored = vars(event)
    row: Row = {"id": event.originator_id}
    for name in shape.static:
        row[name] = stored.get(name)
    row.update(shape.initial)
    row["state"] = state
    row["version"] = event.originator_version
    row["created_at"] = row["updated_at"] = event.timestamp
    return row


def _follow(row: Row | None, event: Any, shape: _Shape) -> None:
    """``event``'s carried fields into ``row``, if it follows it."""
    version = event.originator_version
    if row is None or row["version"] != version - 1 or row["state"] != event.source:
        raise errors.CorruptEventLogError(projector.off_row(event))
    stored = vars(event)
    for name, initial in shape.carried:
        row[name] = stored.get(name, initial)
    row["version"] = version
    row["updated_at"] = event.timestamp
