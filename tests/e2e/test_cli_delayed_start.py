"""Delayed start through the real CLI on the embedded default (SQLite, in-process
dispatch): docs/scheduling/delayed-start.md's commands as written (`submit --in 2s`,
`status`, `why`, then `run --resume` waits for the start and runs it), its Python
example, and the bad values (one `error:` line, exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests.e2e.inprocess import InProcess, on_sqlite
from tests.e2e.test_cli import EXAMPLE, ROOT, make_cli, one_line_error

PAGE = ROOT / "docs" / "scheduling" / "delayed-start.md"


def doc_blocks(language: str) -> list[str]:
    """The page's code blocks in ``language`` ("": the unlabelled ones, the outputs)."""
    fences = re.findall(r"^```(\w*)\n(.*?)^```$", PAGE.read_text(), re.MULTILINE | re.DOTALL)
    return [text for lang, text in fences if lang == language]


def test_the_docs_delayed_start_example_runs_as_written(tmp_path: Path) -> None:
    cli = make_cli(tmp_path)
    assert cli("db", "init").returncode == 0
    submit, status, why, run = [shlex.split(line) for line in doc_blocks("sh")[0].splitlines()]
    assert {submit[0], status[0], why[0], run[0]} == {"flowforge"}

    done = cli(*[EXAMPLE if a.endswith(".toml") else a for a in submit[1:]])

    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert f"note: run {run_id} starts at " in done.stderr
    start_at = datetime.fromisoformat(cli.json("status", run_id)["start_at"])

    def with_id(args: list[str]) -> list[str]:
        return [a.replace("RUN", run_id[:8]) for a in args[1:]]

    # Each command is a process of its own: on a loaded machine the 2 s can pass before
    # `status` or `why` looks, and then the run is due (a scheduler starts it).
    shown = cli(*with_id(status))
    assert shown.returncode == 0, shown.stderr
    waiting = r"\(in [\d.]+s\)|\(due: a scheduler starts it on its next pass\)"
    assert re.search(rf"^  starts at \S+Z ({waiting})$", shown.stdout, re.MULTILINE)
    asked = cli(*with_id(why), "--json")
    assert asked.returncode == 0, asked.stderr
    reason = json.loads(asked.stdout)["reason"]
    assert reason in ("waiting_for_start_time", "start_due"), asked.stdout

    done = cli(*with_id(run), timeout=120)

    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^run \S+ succeeded in ", done.stdout, re.MULTILINE), done.stdout
    history = cli.json("history", run_id)
    started = next(e for e in history if e["transition"] == "start")
    first_claim = min(e["at"] for e in history if e["transition"] == "claim")
    # Started by the scheduler at its start time by the database's clock, not before.
    assert (started["actor"], started["source"]) == ("scheduler", "pending")
    assert datetime.fromisoformat(started["at"]) >= start_at
    assert datetime.fromisoformat(first_claim) >= start_at


def test_the_docs_python_example_runs(tmp_path: Path) -> None:
    (block,) = doc_blocks("python")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("FLOWFORGE_")},
    )
    assert done.returncode == 0, done.stderr
    shown = next(b for b in doc_blocks("") if b.startswith("pending"))
    assert done.stdout.splitlines() == shown.splitlines()


@pytest.fixture
def cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> InProcess:
    return on_sqlite(tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--in", "10"], "argument --in: '10' is not a duration; write e.g. 90s"),
        (["--in", "soon"], "argument --in: 'soon' is not a duration"),
        (["--in", "400d"], "argument --in: must be at most 365 days"),
        (["--at", "tomorrow"], "argument --at: 'tomorrow' is not an ISO 8601 time"),
        (["--at", "2026-01-31T12:00Z", "--in", "5m"], "give --at TIME or --in DURATION"),
    ],
)
def test_a_bad_start_time_is_one_line_and_exit_2_with_nothing_written(
    cli: InProcess, flags: list[str], problem: str
) -> None:
    done = cli("submit", EXAMPLE, *flags)
    assert done.returncode == exits.EXIT_BAD_INPUT
    # argparse's refusals: one error line (no usage block, issue #49), then where the
    # usage is; ours, one line.
    if problem.startswith("argument "):
        assert done.stderr.startswith(f"error: {problem}"), done.stderr
        assert "usage:" not in done.stderr and "Traceback" not in done.stderr
    else:
        assert problem in one_line_error(done)
    assert cli.json("runs") == []


def test_a_start_time_in_the_past_starts_at_once(cli: InProcess) -> None:
    done = cli("submit", EXAMPLE, "--at", "2020-01-01T00:00:00+01:00", "--json")
    assert done.returncode == 0, done.stderr
    assert '"start_at": null' in done.stdout
    assert "starts at" not in done.stderr


def test_runs_shows_a_delayed_runs_start_time(cli: InProcess) -> None:
    done = cli("submit", EXAMPLE, "--in", "1h30m")
    assert done.returncode == 0, done.stderr
    listing = cli("runs").stdout
    assert re.search(r"^  starts at \S+Z \(in 1h(29|30)m\)$", listing, re.MULTILINE), listing
