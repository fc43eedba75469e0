"""Every test the docs and the README name exists: a renamed or deleted test fails here,
not in a reader's search. A reference is `` `tests/<path>.py` `` optionally followed by
``::<test>`` and ``::<test>`` (a class, then its method); ``...::<name>`` is shorthand for
the file of the test named just before it and is checked against that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
REFERENCE = re.compile(r"`(tests/[\w/]+\.py|\.\.\.)((?:::[\w\-]+(?:\[[^\]`]*\])?)*)")
DEFINED = r"^\s*(?:def|class) {}\b"


def references(text: str) -> list[tuple[str, list[str]]]:
    """``(file, names)`` for each reference, ``...`` resolved to the last test's file."""
    found: list[tuple[str, list[str]]] = []
    last = ""
    for match in REFERENCE.finditer(text):
        path, tail = match.group(1), match.group(2)
        names = [part.split("[")[0] for part in tail.split("::") if part]
        if path == "...":
            if not last:
                continue
            path = last
        elif names:  # a bare file mentioned in passing is not what ``...`` abbreviates
            last = path
        found.append((path, names))
    return found


def missing(text: str) -> list[str]:
    """The references in ``text`` whose file or test does not exist."""
    problems = []
    for path, names in references(text):
        file = ROOT / path
        if not file.is_file():
            problems.append(path)
            continue
        source = file.read_text()
        for name in names:
            if not re.search(DEFINED.format(re.escape(name)), source, re.MULTILINE):
                problems.append(f"{path}::{name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_test_a_page_names_exists(page: Path) -> None:
    assert missing(page.read_text()) == []


def test_a_renamed_test_and_a_missing_file_are_caught() -> None:
    # The check itself: a name that is not defined and a file that is not there.
    text = (
        "`tests/unit/test_docs_references.py::test_that_does_not_exist`, "
        "`...::test_every_test_a_page_names_exists`, `tests/unit/no_such_file.py`"
    )
    assert missing(text) == [
        "tests/unit/test_docs_references.py::test_that_does_not_exist",
        "tests/unit/no_such_file.py",
    ]
