"""Trusted handlers: the only code a worker runs.

A dispatch names a task type; the worker looks it up here, in a registry filled by code
the worker's operator imported (``@task("send_email")``). Nothing in a message is ever
imported or executed. An unknown type fails the task with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload
from uuid import UUID

from flowforge import errors


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a handler knows about the attempt it runs."""

    task_run_id: UUID
    workflow_run_id: UUID
    task_key: str
    task_type: str
    #: The run's inputs, as submitted.
    inputs: Mapping[str, Any]
    #: The results of the tasks this one depends on, by task key.
    upstream: Mapping[str, Any]
    attempt: int
    fencing_token: int
    worker_id: str
    #: An element of a mapped task (``map_over``): its input element and its index in
    #: the upstream's list (its ``upstream`` is empty); ``None`` for every other task.
    item: Any = None
    index: int | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across every attempt of this task run: use it to de-duplicate side
        effects (a payment, an email) that a retry or a redelivery could repeat."""
        return f"flowforge:{self.task_run_id}"


Handler = Callable[[TaskContext], Any]


class TaskRegistry:
    """Task types to handlers."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    @overload
    def task(self, task_type: str) -> Callable[[Handler], Handler]: ...

    @overload
    def task(self, task_type: Handler) -> Handler: ...

    def task(self, task_type: str | Handler) -> Callable[[Handler], Handler] | Handler:
        """Register the decorated function as the handler of ``task_type``:
        ``@task("send_email")``; a bare ``@task`` registers it under its own name (the
        type a workflow file's task then names)."""
        if callable(task_type):
            handler = task_type
            name = getattr(handler, "__name__", "")
            if not name.isidentifier():
                raise errors.ConfigurationError(
                    f"a bare @task needs a function with a name to be its task type; "
                    f'{handler!r} has none: write @task("TYPE")'
                )
            return self.task(name)(handler)
        if not isinstance(task_type, str):
            raise errors.ConfigurationError(
                f'@task takes a task type, as @task("send_email"), got {task_type!r}'
            )
        if not task_type.isidentifier():
            raise errors.ConfigurationError(
                f"task type {task_type!r} is not a plain identifier (letters, digits, _)"
            )

        def register(handler: Handler) -> Handler:
            existing = self._handlers.get(task_type)
            if existing is not None and existing is not handler:
                raise errors.ConfigurationError(
                    f"task type {task_type!r} already has a handler "
                    f"({_name(existing)}); each type has exactly one"
                )
            self._handlers[task_type] = handler
            return handler

        return register

    def get(self, task_type: str) -> Handler:
        try:
            return self._handlers[task_type]
        except KeyError:
            raise errors.UnknownTaskTypeError(
                f"no handler is registered for task type {task_type!r} in this worker "
                f"(registered: {', '.join(sorted(self._handlers)) or 'none'}); register "
                f"one with @task({task_type!r}) in a module the worker imports (--tasks)"
            ) from None

    def __contains__(self, task_type: object) -> bool:
        return task_type in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)


def _name(handler: Handler) -> str:
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', '?')}"


#: The registry ``@task`` fills by default.
default_registry = TaskRegistry()
task = default_registry.task
