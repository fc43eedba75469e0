"""FlowForge: an event-sourced workflow engine.

The Python API is the command line's, importable::

    from flowforge import FlowForge, ProcessGroup, Transport, load_definition, task

    @task("extract")
    def extract(ctx): ...

    with FlowForge("sqlite:///flowforge.db") as app:
        run_id = app.start_workflow_run(load_definition("etl.toml"), {"rows": 8})
        with ProcessGroup(app, Transport.in_memory()) as group:
            print(group.wait_for(run_id).state)

Names are imported on first use, not by ``import flowforge``: the pure core
(``flowforge.aggregates``) is imported through this package too, and must not drag in
the database drivers and the broker client (``tests/unit/test_import_contracts.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flowforge import errors
from flowforge.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    DatabaseUnavailableError,
    FlowForgeError,
    InvalidWorkflowDefinitionError,
    SchemaVersionError,
    UnknownRunError,
    UnknownTaskRunError,
    UnknownTaskTypeError,
)

if TYPE_CHECKING:
    from flowforge.aggregates.definition import RetryPolicy, TaskDefinition, WorkflowDefinition
    from flowforge.aggregates.on_failure import OnFailure
    from flowforge.app.commands import Finish
    from flowforge.app.definition_files import load_definition
    from flowforge.app.service import FlowForge
    from flowforge.app.why import Explanation, why
    from flowforge.bootstrap import ProcessGroup, Transport
    from flowforge.config import BrokerConfig, Settings
    from flowforge.processes.registry import TaskContext, TaskRegistry, default_registry, task

#: Each lazily imported name and the module that defines it.
_LAZY: dict[str, str] = {
    "FlowForge": "flowforge.app.service",
    "WorkflowDefinition": "flowforge.aggregates.definition",
    "TaskDefinition": "flowforge.aggregates.definition",
    "RetryPolicy": "flowforge.aggregates.definition",
    "OnFailure": "flowforge.aggregates.on_failure",
    "load_definition": "flowforge.app.definition_files",
    "task": "flowforge.processes.registry",
    "TaskContext": "flowforge.processes.registry",
    "TaskRegistry": "flowforge.processes.registry",
    "default_registry": "flowforge.processes.registry",
    "ProcessGroup": "flowforge.bootstrap",
    "Transport": "flowforge.bootstrap",
    "Settings": "flowforge.config",
    "BrokerConfig": "flowforge.config",
    "why": "flowforge.app.why",
    "Explanation": "flowforge.app.why",
    "Finish": "flowforge.app.commands",
}

__all__ = [
    "BrokerConfig",
    "BrokerUnavailableError",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "Explanation",
    "Finish",
    "FlowForge",
    "FlowForgeError",
    "InvalidWorkflowDefinitionError",
    "OnFailure",
    "ProcessGroup",
    "RetryPolicy",
    "SchemaVersionError",
    "Settings",
    "TaskContext",
    "TaskDefinition",
    "TaskRegistry",
    "Transport",
    "UnknownRunError",
    "UnknownTaskRunError",
    "UnknownTaskTypeError",
    "WorkflowDefinition",
    "default_registry",
    "errors",
    "load_definition",
    "task",
    "why",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flowforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
