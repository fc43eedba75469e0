"""``@task``: with a type, or bare (issue #49: a bare ``@task`` raised AttributeError)."""

from __future__ import annotations

from typing import Any

import pytest

from flowforge import errors
from flowforge.processes.registry import TaskContext, TaskRegistry


def test_a_bare_task_decorator_registers_the_function_under_its_own_name() -> None:
    registry = TaskRegistry()

    @registry.task
    def send_email(ctx: TaskContext) -> Any:
        return "sent"

    assert list(registry) == ["send_email"]
    assert registry.get("send_email") is send_email


def test_a_task_type_that_is_neither_a_name_nor_a_function_is_refused_clearly() -> None:
    registry = TaskRegistry()
    with pytest.raises(errors.ConfigurationError, match=r"@task takes a task type"):
        registry.task(3)  # type: ignore[call-overload]
    with pytest.raises(errors.ConfigurationError, match=r"write @task\(\"TYPE\"\)"):
        registry.task(lambda ctx: None)
