"""The help's examples show what this FlowForge prints: the schema version it creates."""

from __future__ import annotations

import re
from pathlib import Path

from flowforge.cli.grammar import maintenance
from flowforge.projections.schema import SCHEMA_VERSION


def test_the_db_examples_show_the_current_schema_version() -> None:
    examples = " ".join(command.example for command in maintenance.DB_ACTIONS)
    assert examples.count(f"schema version {SCHEMA_VERSION}") == 2


def test_docs_cli_shows_the_current_schema_version() -> None:
    """docs/cli.md's `db` transcripts and messages name the version this FlowForge
    creates (and one before or after it where the message is about another)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text()
    shown = {int(v) for v in re.findall(r"schema version (\d+)", text)}
    shown |= {int(v) for v in re.findall(r"(?:needs version|only up to) (\d+)", text)}
    assert shown and shown <= {SCHEMA_VERSION - 1, SCHEMA_VERSION, SCHEMA_VERSION + 1}
