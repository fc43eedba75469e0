"""The help's examples show what this FlowForge prints: the schema version it creates."""

from __future__ import annotations

from flowforge.cli import parser
from flowforge.projections.schema import SCHEMA_VERSION


def test_the_db_examples_show_the_current_schema_version() -> None:
    assert parser.SCHEMA_VERSION == SCHEMA_VERSION
    examples = " ".join(command.example for command in parser.DB_ACTIONS)
    assert examples.count(f"schema version {SCHEMA_VERSION}") == 2
