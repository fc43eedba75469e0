"""The app layer owns the publisher protocol; the processes implement it (pure)."""

from __future__ import annotations

import ast
from pathlib import Path

from flowforge.app import ports
from flowforge.processes import transport

APP = Path(ports.__file__).parent


def test_the_in_memory_publisher_satisfies_the_apps_port() -> None:
    channel = transport.InMemoryDispatchChannel()
    assert isinstance(channel.publisher(), ports.DispatchPublisher)
    assert transport.DispatchPublisher is ports.DispatchPublisher


def test_no_app_module_imports_the_processes_layer() -> None:
    upward = []
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "flowforge.processes"
            ):
                upward.append(f"{path.relative_to(APP)}: {node.module}")
            if isinstance(node, ast.Import):
                upward += [
                    f"{path.relative_to(APP)}: {a.name}"
                    for a in node.names
                    if a.name.startswith("flowforge.processes")
                ]
    assert upward == []


def test_no_module_outside_the_store_names_a_sql_statement() -> None:
    from flowforge.projections import queries

    names = set(queries.load("sqlite"))
    package = APP.parent
    leaks = []
    for path in package.rglob("*.py"):
        if path.is_relative_to(package / "projections"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                leaks.append(f"{path.relative_to(package)}: {node.value!r}")
    assert leaks == []
