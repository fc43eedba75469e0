"""docs/workflow-file.md is what tools/definition_reference.py writes from the model.

The page is generated (``make docs``), never edited by hand: a field added, removed or
re-bounded in ``aggregates/definition.py`` without regenerating the page fails here, and
so does a field with no description (the page's "meaning" column).
"""

from __future__ import annotations

import re
import tomllib

from pydantic import BaseModel, Field

from flowforge.aggregates.definition import parse_definition
from tools import definition_reference


def test_the_committed_page_is_current() -> None:
    page = definition_reference.PAGE.read_text(encoding="utf-8")
    assert page == definition_reference.render(), "docs/workflow-file.md is stale: run `make docs`"


def test_every_field_has_a_description() -> None:
    assert definition_reference.missing_descriptions() == []


def test_a_field_shows_its_type_default_bounds_and_meaning() -> None:
    class Model(BaseModel):
        """A model."""

        wait_seconds: float | None = Field(default=None, gt=0, le=86400.0, description="how long")

    page = definition_reference.render([("A thing", "the top level", Model)])
    assert "| `wait_seconds` | number, or none | none | > 0, <= 86,400 | how long |" in page


def test_the_pages_example_is_a_valid_definition() -> None:
    (block,) = re.findall(r"^```toml\n(.*?)^```", definition_reference.HEADER, re.M | re.S)
    assert parse_definition(tomllib.loads(block)).name == "etl"
