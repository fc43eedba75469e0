"""Every workflow snippet (a ```toml block) of docs/scheduling.md and its pages is a
valid definition, so the fields they teach exist with the values they show."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from flowforge.aggregates.definition import parse_definition

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "scheduling.md", *sorted((ROOT / "docs" / "scheduling").glob("*.md"))]


def snippets() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"^```toml\n(.*?)^```", page.read_text(), re.M | re.S):
            found.append((page.name, block))
    return found


def test_the_pages_have_workflow_snippets() -> None:
    assert {name for name, _ in snippets()} >= {"scheduling.md", "timeouts.md"}


@pytest.mark.parametrize(("page", "block"), snippets())
def test_each_workflow_snippet_is_a_valid_definition(page: str, block: str) -> None:
    definition = parse_definition(tomllib.loads(block))
    assert definition.tasks
