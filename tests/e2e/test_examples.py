"""Every example runs: the main job on PostgreSQL and RabbitMQ, and the README's Python."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests import servers, topology
from tests.e2e import test_readme as readme
from tests.e2e.cluster import admin

ROOT = Path(__file__).resolve().parents[2]


def test_the_main_job_runs_the_fan_out_workflow_on_postgres_and_rabbitmq() -> None:
    servers.require_postgres()
    servers.require_rabbitmq()
    broker = topology.unique_broker_config("ff-main")
    dbname = f"flowforge_main_job_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "FLOWFORGE_DATABASE_URL": (
            f"postgresql://{servers.POSTGRES_USER}@{servers.POSTGRES_HOST}:"
            f"{servers.POSTGRES_PORT}/{dbname}"
        ),
        **topology.broker_environment(broker),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "examples.main_job"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        topology.delete_topology(broker)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = {"clean", "enrich", "extract", "load", "score"}
    words = [line.split() for line in done.stdout.splitlines()]
    rows = {w[0]: w[1:3] for w in words if w and w[0] in keys}
    assert rows == {
        "clean": ["succeeded", "1"],
        "enrich": ["succeeded", "2"],
        "extract": ["succeeded", "1"],
        "load": ["succeeded", "1"],
        "score": ["succeeded", "1"],
    }
    assert re.search(r"^run \S+: succeeded$", done.stdout, re.MULTILINE)
    # The report within 80 columns (issue #49: 130); not the commands to paste after it,
    # which carry the database's URL.
    report = done.stdout.split("\ninspect it:")[0]
    assert all(len(line) <= 80 for line in report.splitlines() if "://" not in line)
    assert done.stdout.startswith(f"database: {env['FLOWFORGE_DATABASE_URL']}\n")


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [block for block in blocks if block.startswith("import etl_tasks")]


@pytest.mark.parametrize("block", readme_python_blocks())
def test_the_readme_python_example_runs(block: str, tmp_path: Path) -> None:
    """In a directory holding only the README's own two files, as a reader's would:
    not the checkout, so nothing of the repository's is importable."""
    for name, text in readme.files().items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWFORGE_")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["succeeded", "extract succeeded 1", "load succeeded 1"]


def test_the_readme_has_a_runnable_python_example() -> None:
    assert readme_python_blocks(), "README.md lost its runnable Python example"
