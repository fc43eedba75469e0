"""After a demo, the user can look at what it did; a read-only command never creates a
database; and the main job (`make demo`) says where it runs, falling back to the
embedded default when its servers are unreachable."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import Cli, clean_environment, one_line_error

MISSING_RUN = "0f0f0f0f-0000-4000-8000-000000000000"


def printed_commands(stdout: str) -> list[list[str]]:
    """The `flowforge ...` command lines a command printed for the user to paste (the
    program as printed: ``flowforge``, or this installation's script when the PATH does
    not find one), without the program."""
    return [
        words[1:]
        for line in stdout.splitlines()
        if line.strip() and Path((words := shlex.split(line.strip()))[0]).name == "flowforge"
    ]


def test_the_demo_run_is_where_the_commands_it_prints_find_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path, clean_environment())
    done = cli("demo")
    assert done.returncode == 0, done.stderr
    (run,) = cli.json("runs")  # the next command the user types finds it
    assert run["state"] == "succeeded"
    commands = printed_commands(done.stdout)
    assert [c[0] for c in commands] == ["status", "history", "why"]
    assert all(run["run_id"].endswith(c[1].split("/")[0]) for c in commands)
    for command in commands:
        pasted = cli(*command)
        assert pasted.returncode == 0, (command, pasted.stderr)
    assert "enrich succeeded" in cli(*commands[2]).stdout


def test_a_demo_on_a_database_given_by_flag_prints_commands_with_that_flag(
    tmp_path: Path,
) -> None:
    database = tmp_path / "my demo.db"
    cli = Cli(tmp_path, clean_environment())
    done = cli("demo", "--database-url", f"sqlite:///{database}")
    assert done.returncode == 0, done.stderr
    assert str(database) in done.stdout.splitlines()[0]
    commands = printed_commands(done.stdout)
    assert commands and all(c[:2] == ["--database-url", f"sqlite:///{database}"] for c in commands)
    assert cli(*commands[0]).returncode == 0
    assert not (tmp_path / ".flowforge").exists()


@pytest.mark.parametrize(
    "command",
    [["runs"], ["status", MISSING_RUN], ["history", MISSING_RUN], ["why", f"{MISSING_RUN}/a"]],
)
def test_a_read_only_command_on_a_missing_sqlite_file_names_it_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    typo = tmp_path / "flowforg.db"
    cli = Cli(tmp_path, clean_environment(FLOWFORGE_DATABASE_URL=f"sqlite:///{typo}"))
    done = cli(*command)
    assert done.returncode == 4, done.stderr
    line = one_line_error(done)
    assert str(typo) in line and "no SQLite database" in line
    assert not typo.exists()


def test_runs_in_a_fresh_directory_says_there_are_none_and_creates_nothing(
    tmp_path: Path,
) -> None:
    cli = Cli(tmp_path, clean_environment())
    done = cli("runs")
    assert done.returncode == 0, done.stderr
    assert "no runs yet" in done.stdout and "flowforge demo" in done.stdout
    assert cli.json("runs") == []
    assert not (tmp_path / ".flowforge").exists()


# --- the main job (`make demo`) ---------------------------------------------------------


def main_job(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.main_job"],
        cwd=cwd,
        env=clean_environment(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "unreachable",
    [
        {"FLOWFORGE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/flowforge_demo"},
        {"FLOWFORGE_BROKER_URL": "amqp://guest:guest@127.0.0.1:1/%2F"},
    ],
    ids=["database", "broker"],
)
def test_the_main_job_falls_back_to_the_embedded_default_and_runs_on_it(
    tmp_path: Path, unreachable: dict[str, str]
) -> None:
    done = main_job(tmp_path, **unreachable)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "127.0.0.1:1 is not reachable" in done.stdout
    assert "falling back to the embedded default" in done.stdout
    assert "succeeded in" in done.stdout
    # It ran where it said, and the commands it printed find the run there, pasted
    # as printed into the same shell (the unreachable setting still set there).
    (run,) = Cli(tmp_path, clean_environment()).json("runs")
    assert run["state"] == "succeeded"
    assert (tmp_path / ".flowforge" / "flowforge.db").is_file()
    printed = done.stdout.split("inspect it", 1)[1].splitlines()[1:]
    commands = [line.strip() for line in printed if line.startswith("  ")]
    assert len(commands) == 3, done.stdout
    for command in commands:
        pasted = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=clean_environment(**unreachable),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert pasted.returncode == 0, (command, pasted.stderr)
        assert run["run_id"][-8:] in pasted.stdout or run["run_id"] in pasted.stdout


def test_the_main_job_says_which_database_and_broker_it_uses(tmp_path: Path) -> None:
    done = main_job(tmp_path, FLOWFORGE_DATABASE_URL="postgresql://u:secret@127.0.0.1:1/d")
    lines = done.stdout.splitlines()
    assert lines[0] == "database: postgresql://u:***@127.0.0.1:1/d"
    assert lines[1] == "broker:   amqp://guest:***@127.0.0.1:5672/%2F"
    assert "secret" not in done.stdout
