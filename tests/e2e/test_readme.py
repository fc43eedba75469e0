"""The README's "Your own workflow" runs as written: its files are written into an empty
directory under the names their first line gives, and its commands are run there."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Your own workflow"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section(), re.MULTILINE | re.DOTALL)


def files() -> dict[str, str]:
    """Each block whose first line is ``# NAME``, by NAME."""
    named = {}
    for block in blocks("toml") + blocks("python"):
        first = block.splitlines()[0]
        if re.fullmatch(r"# [\w./]+\.(toml|json|py)", first):
            named[first[2:]] = block
    return named


def flowforge() -> list[str]:
    """`flowforge` as the README means it: the installed console script."""
    script = Path(sys.executable).parent / "flowforge"
    return [str(script)] if script.exists() else [sys.executable, "-m", "flowforge"]


def test_the_readme_names_where_each_file_goes() -> None:
    assert set(files()) == {"etl.toml", "etl_tasks.py"}
    assert "make a directory with the two files" in section()


def test_the_readme_workflow_runs_as_written(tmp_path: Path) -> None:
    for name, text in files().items():
        (tmp_path / name).write_text(text)
    (commands,) = blocks("sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWFORGE_")}
    env.pop("PYTHONPATH", None)  # only what the README says: the working directory
    outputs = []
    for line in commands.splitlines():
        args = shlex.split(line, comments=True)
        assert args[0] == "flowforge", line
        done = subprocess.run(
            [*flowforge(), *args[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outputs.append(done.stdout)
    assert "etl" in outputs[-1]
    assert "succeeded" in outputs[-1]
    (written,) = (tmp_path / "warehouse").iterdir()
    assert json.loads(written.read_text())[0] == {"id": 0, "source": "s3://bucket/day"}


def test_the_readme_uses_one_name_for_the_command() -> None:
    assert ".venv/bin/flowforge " not in (ROOT / "README.md").read_text().split(SECTION)[1]
