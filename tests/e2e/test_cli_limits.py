"""Concurrency limits through real processes on the embedded default: the example of
docs/scheduling/limits.md as written (a limit of 1 on a type of five tasks, run by four
workers: never two at once, all succeed), and bad input refused in one line."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests.e2e.test_cli import ROOT, Cli, make_cli, one_line_error

DOC = ROOT / "docs" / "scheduling" / "limits.md"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = make_cli(tmp_path)
    done = cli("db", "init")
    assert done.returncode == 0, done.stderr
    return cli


def doc_commands() -> list[list[str]]:
    (block,) = re.findall(r"^```sh\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    return [shlex.split(line) for line in block.splitlines()]


def test_the_docs_limit_example_never_runs_two_at_once_and_all_succeed(cli: Cli) -> None:
    commands = doc_commands()
    assert [c[1] for c in commands] == ["limit", "run", "limit"]
    outputs = []
    for command in commands:
        done = cli(*[str(ROOT / a) if a.endswith(".toml") else a for a in command[1:]])
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0].strip() == "at most 1 call_api task runs at once"
    # docs/scheduling/limits.md shows the run's last line as `run` prints it (issue #49).
    last = r"^run [0-9a-f]{8} succeeded in \S+ \(\S+ running\): 5 tasks, 5 attempts$"
    assert re.search(last, outputs[1], re.MULTILINE), outputs[1]
    assert re.search(last, DOC.read_text().replace("4c1f09b2", "0" * 8), re.MULTILINE)
    assert re.search(r"^call_api\s+1\s+0\s", outputs[2], re.MULTILINE), outputs[2]

    (run,) = cli.json("runs")
    assert run["state"] == "succeeded"
    spans: dict[str, list[str]] = {}
    for entry in cli.json("history", run["run_id"]):
        if entry["transition"] in ("claim", "succeed") and entry["task_key"]:
            spans.setdefault(entry["task_key"], []).append(entry["at"])
    assert len(spans) == 5 and all(len(times) == 2 for times in spans.values()), spans
    ordered = sorted(spans.values())
    for (_, finished), (claimed, _) in itertools.pairwise(ordered):
        assert claimed >= finished, f"two call_api tasks ran at once: {ordered}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("limit", "set", "call_api", "0"), "a limit must be >= 1"),
        (("limit", "set", "call_api", "two"), "a limit must be a whole number"),
        (("limit", "set", "call-api", "2"), "is not a plain identifier"),
    ],
)
def test_a_bad_limit_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    done = make_cli(tmp_path)(*args)  # refused before any database is opened
    assert done.returncode == exits.EXIT_BAD_INPUT == 2
    assert message in one_line_error(done)
