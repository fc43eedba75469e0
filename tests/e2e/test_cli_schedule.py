"""`flowforge schedule`, through real subprocesses on SQLite: the commands of
docs/scheduling/cron.md as written, the refusals with their exit codes, a real
`flowforge scheduler` firing an every-second schedule, and the Python examples."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flowforge.app.service import FlowForge
from tests.e2e.test_cli import ROOT, Cli, clean_environment, make_cli
from tests.helpers import wait_until

DOC = ROOT / "docs" / "scheduling" / "cron.md"
EXAMPLE = str(ROOT / "examples" / "fan_out.toml")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = make_cli(tmp_path)
    done = cli("db", "init")
    assert done.returncode == 0, done.stderr
    return cli


def doc_blocks(fence: str) -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_the_docs_commands_run_as_written(cli: Cli) -> None:
    commands = [shlex.split(line) for line in doc_blocks("sh")[0].splitlines()]
    assert [c[:3] for c in commands] == [
        ["flowforge", "schedule", verb] for verb in ("add", "list", "pause", "resume", "delete")
    ]
    add, listing, pause, resume, delete = (
        [str(ROOT / a) if a.endswith(".toml") else a for a in c[1:]] for c in commands
    )
    done = cli(*add)
    assert done.returncode == 0, done.stderr
    assert re.match(
        r"schedule nightly: fan_out at 30 2 \* \* \* \(Europe/Paris\), next ", done.stdout
    )
    header, line, under = cli(*listing).stdout.splitlines()
    assert header == "NAME     STATE   CRON                       NEXT FIRE"
    date = r"\d{4}-\d\d-\d\d 02:30:00 CES?T"
    cron = r"30 2 \* \* \* \(Europe/Paris\)"
    assert re.fullmatch(rf"nightly  active  {cron}  {date}", line)
    assert under == "  fan_out; never fired"
    assert all(len(text) <= 80 for text in (header, line, under))  # issue #49: 140
    assert cli(*pause).stdout == "schedule nightly: paused\n"
    assert cli(*resume).stdout.startswith("schedule nightly: resumed, next ")
    (shown,) = cli.json("schedule", "list")
    assert (shown["state"], shown["inputs"], shown["catch_up"]) == ("active", {"rows": 8}, 0)
    assert shown["next_fire_at"].endswith(("T01:30:00.000000Z", "T00:30:00.000000Z"))
    assert cli(*delete).stdout == "schedule nightly: deleted\n"


def test_a_scheduler_process_fires_a_due_schedule_once_per_fire_time(
    cli: Cli, tmp_path: Path
) -> None:
    done = cli("schedule", "add", "tick", "--cron", "* * * * * *", EXAMPLE, "--input", "rows=2")
    assert done.returncode == 0, done.stderr
    scheduler = cli.popen("scheduler", "--interval", "0.2", log=tmp_path / "scheduler.log")
    # Watched in this process, not by a CLI subprocess per look (each costs a start-up).
    with FlowForge(cli.env["FLOWFORGE_DATABASE_URL"], migrate=False) as app:
        try:
            wait_until(lambda: len(app.every_run()) >= 2, 15, "the scheduler fired no schedule")
            app.pause_schedule("tick")
        finally:
            scheduler.send_signal(signal.SIGTERM)
            assert scheduler.wait(timeout=15) == 0, (tmp_path / "scheduler.log").read_text()
        shown = app.get_schedule("tick")
        runs = app.every_run()
    keys = sorted(run.idempotency_key or "" for run in runs)
    assert len(set(keys)) == len(runs) >= 2
    assert all(re.fullmatch(r"schedule:tick@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", k) for k in keys)
    assert shown.last_run_id in {run.id for run in runs}
    assert {(run.workflow_name, str(run.inputs)) for run in runs} == {("fan_out", "{'rows': 2}")}
    assert "schedule fired" in (tmp_path / "scheduler.log").read_text()


def test_the_python_examples_run(tmp_path: Path) -> None:
    (block,) = doc_blocks("python")
    for code in (block, (ROOT / "examples" / "cron_schedule.py").read_text()):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert "fired: 1 run, for 02:30 in Paris" in done.stdout
    assert "fired again at the same moment: []" in done.stdout
