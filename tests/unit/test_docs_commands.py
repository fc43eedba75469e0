"""Every `flowforge` command the README and the docs show is one the command line takes:
its command, its flags and their values parse with the real parser. A renamed command,
a dropped flag or a value a flag no longer accepts fails here, not in a reader's shell.

This parses, every command of every page, fast. Run as written are docs/cli.md's
transcripts (tests/e2e/test_docs_transcripts.py; those that need servers are marked and
say what runs them), the README's "Your own workflow" (tests/e2e/test_readme.py) and its
Python example (tests/e2e/test_examples.py), the demo's printed commands
(tests/e2e/test_cli_demo.py), each scheduling page's (tests/e2e/test_cli_delayed_start.py,
tests/e2e/test_cli_schedule.py, tests/e2e/test_cli_limits.py) and docs/deployment.md's
checks (tests/integration/test_deployment_docs.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from flowforge.cli import parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("**/*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def commands() -> list[tuple[str, str]]:
    """``(page, line)`` for each `flowforge ...` command in a code block: a line of a
    shell block, or a transcript's ``$ flowforge ...`` (continuation lines joined)."""
    found = []
    for page in PAGES:
        for language, block in FENCE.findall(page.read_text(encoding="utf-8")):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                command = line.removeprefix("$ ").strip()
                shown = line.startswith("$ ") or language in ("sh", "")
                if shown and re.match(r"(\S+=\S+ )*flowforge ", command):
                    found.append((str(page.relative_to(ROOT)), command))
    return found


def test_the_docs_show_commands() -> None:
    pages = {page for page, _ in commands()}
    assert {"README.md", "docs/cli.md", "docs/scheduling/cron.md"} <= pages


@pytest.mark.parametrize(("page", "command"), commands())
def test_each_command_the_docs_show_parses(page: str, command: str) -> None:
    words = shlex.split(command, comments=True)
    while "=" in words[0]:  # VAR=value before the command
        words.pop(0)
    assert words[0] == "flowforge", command
    try:
        parser.build().parse_args(words[1:])
    except SystemExit as exc:
        pytest.fail(f"{page}: `{command}` does not parse (exit {exc.code})")
