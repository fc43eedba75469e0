"""Bad input on the command line: one `error:` line naming the problem and exit 2,
before any I/O, on both backends; never a traceback, never a silently stored guess.

Most cases call the CLI's entry point in this process (a subprocess per case would
take minutes); an exception escaping ``main`` fails the test as a traceback would.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowforge.cli import exits
from tests.e2e.inprocess import InProcess, on_sqlite
from tests.e2e.test_cli import EXAMPLE, clean_environment, one_line_error

BAD_INPUT = exits.EXIT_BAD_INPUT


@pytest.fixture
def cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> InProcess:
    return on_sqlite(tmp_path, capsys, monkeypatch)


@pytest.fixture(params=["sqlite", "postgres"])
def any_cli(request: pytest.FixtureRequest, cli: InProcess) -> InProcess:
    """The CLI on SQLite, or on this session's PostgreSQL database."""
    if request.param == "postgres":
        cli.database_url = request.getfixturevalue("postgres_url")
    return cli


# --- database URLs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://postgres@127.0.0.1:abc/flowforge", "port 'abc'"),
        ("postgresql://postgres@127.0.0.1:99999/flowforge", "port '99999'"),
        ("postgresql://postgres@127.0.0.1:0/flowforge", "port '0'"),
        ("postgresql://postgres:secret@[127.0.0.1:5432/flowforge", "Invalid IPv6"),
    ],
)
def test_a_database_url_with_a_bad_port_is_one_line_naming_it(
    cli: InProcess, url: str, problem: str
) -> None:
    done = cli("--database-url", url, "runs")
    assert done.returncode == BAD_INPUT
    line = one_line_error(done)
    assert problem in line
    assert "secret" not in line


# --- --input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "problem"),
    [
        ("rows=1e999", "rows=1e999: looks like JSON but is not valid JSON"),
        ('tags=["a",', 'tags=["a",: looks like JSON but is not valid JSON'),
        ("x=NaN", "NaN is not a number a run can store"),
        ("x=-Infinity", "-Infinity is not a number a run can store"),
        ("x={", "x={: looks like JSON"),
        ("x=+1", "x=+1: looks like JSON"),
        ("x=" + "1" * 5000, "looks like JSON"),
        ("x=" + "[" * 100_000, "looks like JSON"),
        ("NaN", "expected KEY=VALUE"),
        ("=8", "expected KEY=VALUE"),
    ],
)
def test_a_malformed_input_is_refused_and_nothing_is_stored(
    any_cli: InProcess, pair: str, problem: str
) -> None:
    def run_ids() -> list[str]:
        return [run["run_id"] for run in any_cli.json("runs", "--limit", "1000")]

    before = run_ids()
    done = any_cli("submit", EXAMPLE, "--input", pair)
    assert done.returncode == BAD_INPUT, done.stderr
    assert problem in one_line_error(done)
    assert run_ids() == before


def test_a_repeated_input_key_is_an_error(any_cli: InProcess) -> None:
    done = any_cli("submit", EXAMPLE, "--input", "rows=1", "-i", "rows=2")
    assert done.returncode == BAD_INPUT
    assert "--input rows: given more than once" in one_line_error(done)


def test_json_looking_values_parse_and_plain_words_stay_strings(cli: InProcess) -> None:
    pairs = {
        "rows": ("8", 8),
        "ratio": ("-0.5", -0.5),
        "tags": ('["a", "b"]', ["a", "b"]),
        "on": ("true", True),
        "quoted": ('"NaN"', "NaN"),
        "day": ("2026-01-31", "2026-01-31"),
        "version": ("1.2.3", "1.2.3"),
        "source": ("s3://bucket/day", "s3://bucket/day"),
        "words": ("hello world", "hello world"),
        "empty": ("", ""),
    }
    args = [arg for key, (raw, _) in pairs.items() for arg in ("--input", f"{key}={raw}")]
    run_id = cli.json("submit", EXAMPLE, *args)["run_id"]
    assert cli.json("status", run_id)["inputs"] == {k: v for k, (_, v) in pairs.items()}


def test_an_argument_that_is_not_utf8_is_refused_naming_its_option(
    any_cli: InProcess,
) -> None:
    done = any_cli("submit", EXAMPLE, "--input", "rows=\udcff", "--input", "a=1")
    assert done.returncode == BAD_INPUT
    assert "--input rows=\\xff: not valid UTF-8 text" in one_line_error(done)
    done = any_cli("submit", EXAMPLE, "--idempotency-key", "k\udcfe")
    assert "--idempotency-key k\\xfe: not valid UTF-8 text" in one_line_error(done)


def test_argument_bytes_that_are_not_utf8_are_refused_by_the_real_command(
    tmp_path: Path,
) -> None:
    # Bytes, as a shell passes them: Python turns the invalid ones into lone surrogates.
    url = f"sqlite:///{tmp_path / 'flowforge.db'}".encode()
    env = {k.encode(): v.encode() for k, v in clean_environment().items()}
    env[b"FLOWFORGE_DATABASE_URL"] = url
    for args, option in (
        ([b"--input", b"rows=\xff"], "--input rows=\\xff"),
        ([b"--idempotency-key", b"k\xfe"], "--idempotency-key k\\xfe"),
    ):
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"flowforge", b"submit", EXAMPLE.encode(), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=False,
        )
        stderr = done.stderr.decode("utf-8", "backslashreplace")
        assert done.returncode == BAD_INPUT, stderr
        assert "Traceback" not in stderr
        assert f"error: {option}: not valid UTF-8 text" in stderr


# --- workflow files: nesting and encodings ------------------------------------------------

_TASKS = '"tasks": [{"key": "a", "type": "a"}]'


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply to read"),
        ("deep.toml", 'name = "w"\nv = ' + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        (
            "deep2.json",
            '{"name": "w", ' + _TASKS + ', "description": ' + "[" * 150 + "]" * 150 + "}",
            "nested more than 100 levels deep",
        ),
    ],
)
def test_a_deeply_nested_workflow_file_is_bad_input_from_the_real_command(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    """The real process: a RecursionError must not escape as a traceback (exit 1)."""
    (tmp_path / name).write_text(text)
    env = {**clean_environment(), "FLOWFORGE_DATABASE_URL": f"sqlite:///{tmp_path / 'ff.db'}"}
    done = subprocess.run(
        [sys.executable, "-m", "flowforge", "submit", name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == BAD_INPUT, done.stderr
    assert f"{name}: {problem}" in one_line_error(done)


def test_a_deeply_nested_input_is_bad_input(cli: InProcess) -> None:
    done = cli("submit", EXAMPLE, "--input", "x=" + "[" * 500 + "]" * 500)
    assert done.returncode == BAD_INPUT, done.stderr
    assert "--input x: nested more than 100 levels deep" in one_line_error(done)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_workflow_file_with_a_utf8_byte_order_mark_is_read(
    any_cli: InProcess, suffix: str
) -> None:
    """Some editors (Notepad) write a BOM: it is read past, as Python's utf-8-sig does."""
    text = (
        'name = "bom"\n[[tasks]]\nkey = "a"\ntype = "a"\n'
        if suffix == ".toml"
        else '{"name": "bom", ' + _TASKS + "}"
    )
    path = any_cli.cwd / f"bom{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    done = any_cli("submit", str(path))
    assert done.returncode == 0, done.stderr
    assert any_cli.json("runs")[0]["workflow"] == "bom"


# --- small things a newcomer trips on -------------------------------------------------------


@pytest.mark.parametrize("flag", ["--database-url", "--broker-url"])
def test_an_empty_url_flag_is_an_error_not_the_default(cli: InProcess, flag: str) -> None:
    done = cli(flag, "", "runs")
    assert done.returncode == BAD_INPUT
    assert f"{flag} is empty" in one_line_error(done)


@pytest.mark.parametrize(
    ("given", "module"), [("slow_tasks.py", "slow_tasks"), ("pkg/t.py", "pkg.t")]
)
def test_a_task_module_given_as_a_file_suggests_its_module_name(
    cli: InProcess, given: str, module: str
) -> None:
    done = cli("run", EXAMPLE, "--tasks", given)
    assert done.returncode == BAD_INPUT
    assert f"give a module name, not a file: {module!r}" in one_line_error(done)


def test_why_of_a_run_id_names_the_runs_tasks_to_ask_about(cli: InProcess) -> None:
    assert cli("submit", EXAMPLE).returncode == 0
    (run,) = cli.json("runs")
    for text in (run["run_id"], run["run_id"][-8:]):
        done = cli("why", text)
        assert done.returncode == BAD_INPUT
        line = one_line_error(done)
        assert f"{text!r} is a run (fan_out), not a task run" in line
        assert f"as {text}/clean (tasks: clean, enrich, extract, load, score)" in line


# --- numbers are bounded before any I/O ---------------------------------------------------


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"max_attempts": 2**31}, "retry.max_attempts"),
        ({"max_attempts": 2**64}, "retry.max_attempts"),
        ({"backoff_seconds": 1e300}, "retry.backoff_seconds"),
        ({"backoff_cap_seconds": 1e300}, "retry.backoff_cap_seconds"),
    ],
)
def test_an_unbounded_number_in_a_workflow_is_bad_input_naming_the_field(
    any_cli: InProcess, retry: dict[str, float], field: str
) -> None:
    path = any_cli.cwd / "big.json"
    path.write_text(
        json.dumps({"name": "big", "retry": retry, "tasks": [{"key": "a", "type": "a"}]})
    )
    done = any_cli("submit", str(path))
    assert done.returncode == BAD_INPUT, done.stderr
    assert f"big.json: {field}: " in one_line_error(done)


def test_a_workflow_with_text_that_is_not_unicode_is_bad_input(any_cli: InProcess) -> None:
    path = any_cli.cwd / "text.json"
    path.write_text(
        '{"name": "w", "description": "\\udcff", "tasks": [{"key": "a", "type": "a"}]}'
    )
    done = any_cli("submit", str(path))
    assert done.returncode == BAD_INPUT, done.stderr
    assert "text.json: description: not valid Unicode text" in one_line_error(done)


@pytest.mark.parametrize("lease", ["1e300", "inf", "604801"])
def test_an_unbounded_lease_in_a_workflow_is_bad_input(any_cli: InProcess, lease: str) -> None:
    path = any_cli.cwd / "lease.toml"
    path.write_text(f'name = "w"\nlease_seconds = {lease}\n[[tasks]]\nkey = "a"\ntype = "a"\n')
    done = any_cli("submit", str(path))
    assert done.returncode == BAD_INPUT, done.stderr
    assert "lease.toml: lease_seconds: " in one_line_error(done)


@pytest.mark.parametrize(
    ("args", "option", "problem"),
    [
        (["runs", "--limit", "abc"], "--limit", "expected a whole number from 1 to"),
        (["runs", "--limit", "0"], "--limit", "must be from 1 to"),
        (["runs", "--limit", str(2**63)], "--limit", "must be from 1 to"),
        (["run", EXAMPLE, "--timeout", "inf"], "--timeout", "at most"),
        (["run", EXAMPLE, "--timeout", "nan"], "--timeout", "at most"),
        (["run", EXAMPLE, "--timeout", "soon"], "--timeout", "expected a number of seconds"),
        (["run", EXAMPLE, "--workers", "100000"], "--workers", "must be from 1 to"),
        (["scheduler", "--interval", "1e300"], "--interval", "at most"),
        (["publisher", "--batch-size", "1e3"], "--batch-size", "expected a whole number"),
        (["worker", "--tasks", "x", "--concurrency", "-1"], "--concurrency", "from 1 to"),
        (["worker", "--tasks", "x", "--batch", "0"], "--batch", "must be from 1 to 1000"),
        (["worker", "--tasks", "x", "--batch", "ten"], "--batch", "expected a whole number"),
    ],
)
def test_an_out_of_range_flag_names_the_flag(
    cli: InProcess, args: list[str], option: str, problem: str
) -> None:
    done = cli(*args)
    assert done.returncode == BAD_INPUT
    assert f"argument {option}: " in done.stderr
    assert problem in done.stderr
    assert "Traceback" not in done.stderr
    assert "_positive" not in done.stderr


# --- smaller things -------------------------------------------------------------------------


def test_version_prints_the_installed_version(cli: InProcess) -> None:
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip().startswith("flowforge ")
    assert done.stdout.split()[1][0].isdigit()


def test_a_broker_error_names_the_flag_when_the_url_came_from_it(cli: InProcess) -> None:
    url = "amqp://guest:guest@127.0.0.1:1/%2F"  # nothing listens on port 1
    done = cli("worker", "--tasks", "examples.tasks", "--broker-url", url)
    line = one_line_error(done)
    assert "Check --broker-url" in line
    assert "FLOWFORGE_BROKER_URL" not in line
    cli.env["FLOWFORGE_BROKER_URL"] = url
    assert "Check FLOWFORGE_BROKER_URL" in one_line_error(
        cli("worker", "--tasks", "examples.tasks")
    )
    invalid = cli("worker", "--tasks", "examples.tasks", "--broker-url", "http://x")
    assert one_line_error(invalid).startswith("error: --broker-url must be an amqp://")
    assert invalid.returncode == BAD_INPUT


def test_every_flag_has_help_that_shows_its_default() -> None:
    from flowforge.cli import parser

    def walk(p: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
        found: list[tuple[str, argparse.Action]] = []
        for action in p._actions:
            if isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    found += [(f"{name} {where}", a) for where, a in walk(sub)]
            else:
                found.append((action.dest, action))
        return found

    missing: list[str] = []
    no_default: list[str] = []
    for where, action in walk(parser.build()):
        if action.dest in ("help", "version"):
            continue
        if not action.help:
            missing.append(where)
        default = action.default
        shown = default not in (None, False, [], "==SUPPRESS==")
        if shown and "default:" not in (action.help or ""):
            no_default.append(where)
    assert missing == []
    assert no_default == []


def test_help_shows_each_commands_own_defaults(cli: InProcess) -> None:
    demo = cli("demo", "--help").stdout
    assert "--broker-url" not in demo  # demo always dispatches in-process
    assert "(default: WARNING)" in demo
    assert "INFO for scheduler" not in demo
    worker = cli("worker", "--help").stdout
    assert "--broker-url" in worker
    assert "(default: INFO)" in worker
