"""Concurrency limits: an operator's limit on a task type, and the pure rules of a claim.

A task type's limit is set and unset by an operator (``flowforge limit set TYPE N``);
each change is an event of the type's :class:`TaskTypeLimit` aggregate (who, when, what),
so the audit log says who changed a limit and when. A definition's task may carry its
own ``max_running`` and a workflow its ``max_running_tasks`` (per run); those are fixed
at submission and need no aggregate of their own.

The rule of a claim (docs/scheduling/limits.md), enforced in SQL by the claim's
conditional writes and stated here once, pure, for the tests and ``why``:

- the task's *type limit* is the smallest of the operator's limit on its type and the
  task's own ``max_running`` (either may be absent; both absent: no type limit);
- the task's *run limit* is its run's ``max_running_tasks``;
- a claim takes a slot of each limit it has, and only if every one has room
  (fewer running than the limit); otherwise it is refused and the task stays ready.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate, DomainEventProtocol

from flowforge import errors
from flowforge.aggregates.definition import MAX_RUNNING

__all__ = ["MAX_RUNNING", "TaskTypeLimit", "change_event", "effective_limit", "limit_id"]

#: A task type's limit aggregate has a stable id derived from the type's name, so a
#: change needs no lookup table: uuid5(this namespace, task type).
NAMESPACE = UUID("5f0f6d2e-3b61-4a8e-9f0c-6c1b1d6a7e21")


def limit_id(task_type: str) -> UUID:
    """The id of ``task_type``'s :class:`TaskTypeLimit`."""
    return uuid5(NAMESPACE, task_type)


def checked_task_type(value: Any) -> str:
    """``value`` if it can name a task type (a plain identifier, as in definitions)."""
    if not isinstance(value, str) or not value.isidentifier():
        raise errors.InvalidLimitError(
            f"task type {value!r} is not a plain identifier (letters, digits and "
            f"underscores, not starting with a digit)"
        )
    return value


def checked_max_running(value: Any) -> int:
    """``value`` if it is a whole number from 1 to ``MAX_RUNNING`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidLimitError(f"a limit must be a whole number >= 1, got {value!r}")
    if not 1 <= value <= MAX_RUNNING:
        raise errors.InvalidLimitError(
            f"a limit must be >= 1 and <= {MAX_RUNNING}, got {value}; to remove a limit, unset it"
        )
    return value


def effective_limit(limits: Iterable[int | None]) -> int | None:
    """The smallest of the limits given (``None``: that one is absent); ``None`` when
    every one is absent: no limit."""
    present = [limit for limit in limits if limit is not None]
    return min(present) if present else None


def has_room(running: int, limit: int | None) -> bool:
    """Whether a claim may take a slot of a limit with ``running`` slots taken."""
    return limit is None or running < limit


def may_claim(
    type_running: int, type_limit: int | None, run_running: int, run_limit: int | None
) -> bool:
    """A claim's whole rule: room under its type limit AND under its run limit."""
    return has_room(type_running, type_limit) and has_room(run_running, run_limit)


class TaskTypeLimit(Aggregate):
    """The operator's limit on one task type: at most ``max_running`` of its tasks run
    at once (``None``: no operator limit)."""

    task_type: str
    max_running: int | None

    class Created(Aggregate.Created):
        task_type: str
        max_running: int | None
        actor: str

    class Changed(Aggregate.Event):
        """The limit set to ``max_running``, or removed (``None``)."""

        task_type: str
        max_running: int | None
        actor: str

        def apply(self, aggregate: TaskTypeLimit) -> None:
            aggregate.max_running = self.max_running

    def __init__(self, task_type: str, max_running: int | None, actor: str) -> None:
        del actor  # recorded on the event
        self.task_type = task_type
        self.max_running = max_running


def change_event(
    task_type: str,
    version: int,
    max_running: int | None,
    *,
    at: datetime,
    actor: str,
) -> DomainEventProtocol[UUID]:
    """The event that sets (``max_running``) or removes (``None``) the limit of
    ``task_type``, whose aggregate is at ``version`` (0: none yet)."""
    task_type = checked_task_type(task_type)
    if max_running is not None:
        max_running = checked_max_running(max_running)
    if version == 0:
        limit = TaskTypeLimit._create(
            TaskTypeLimit.Created,
            id=limit_id(task_type),
            timestamp=at,
            task_type=task_type,
            max_running=max_running,
            actor=actor,
        )
        (created,) = limit.collect_events()
        return created
    # The library makes its events dataclasses at class creation; mypy cannot see
    # their fields.
    changed: Any = TaskTypeLimit.Changed
    event: DomainEventProtocol[UUID] = changed(
        originator_id=limit_id(task_type),
        originator_version=version + 1,
        timestamp=at,
        task_type=task_type,
        max_running=max_running,
        actor=actor,
    )
    return event
