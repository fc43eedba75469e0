"""The `flowforge` command line, through real subprocesses (`python -m flowforge ...`).

Every command runs on the embedded default (SQLite in a temporary directory, in-process
dispatch), plus the bad-input cases with their exit codes; one test runs the example on
PostgreSQL and RabbitMQ with separate scheduler, publisher and worker processes.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pika
import pytest

from flowforge import timefmt
from flowforge.app.definition_files import load_definition
from flowforge.cli import demo, exits
from flowforge.projections.schema import SCHEMA_VERSION
from tests import helpers, servers

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"
EXAMPLE = str(ROOT / "examples" / "fan_out.toml")
TASK_KEYS = {"extract", "clean", "enrich", "score", "load"}
COMMANDS = (
    ["db"],
    ["db", "init"],
    ["db", "migrate"],
    ["db", "rebuild"],
    ["db", "archive"],
    ["db", "restore"],
    ["db", "stats"],
    ["broker"],
    ["broker", "migrate"],
    ["schedule"],
    ["schedule", "add"],
    ["schedule", "list"],
    ["schedule", "pause"],
    ["schedule", "resume"],
    ["schedule", "delete"],
    ["submit"],
    ["run"],
    ["rerun"],
    ["demo"],
    ["worker"],
    ["scheduler"],
    ["publisher"],
    ["runs"],
    ["status"],
    ["history"],
    ["cancel"],
    ["why"],
    ["logs"],
    ["events"],
    ["ui"],
    ["limit"],
    ["limit", "set"],
    ["limit", "unset"],
    ["limit", "list"],
)

FAILING_MODULE = """
from flowforge import task

WORKFLOW = {
    "name": "doomed",
    "retry": {"max_attempts": 2, "backoff_seconds": 0.05},
    "tasks": [
        {"key": "first", "type": "boom"},
        {"key": "after", "type": "boom", "depends_on": ["first"]},
    ],
}


@task("boom")
def boom(ctx):
    raise ValueError(f"disk full on attempt {ctx.attempt}")
"""


@dataclass
class Cli:
    """Runs `python -m flowforge` in a scratch directory with a clean environment."""

    cwd: Path
    env: dict[str, str]
    #: What ``python -m`` runs: the CLI, or a wrapper of it (tests/e2e/recording_spans.py).
    module: str = "flowforge"

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", self.module, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def json(self, *args: str) -> Any:
        done = self(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def popen(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", self.module, *args],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )


def production_processes(
    cli: Cli,
    logs: Path,
    *,
    workers: tuple[str, ...] = ("worker-1", "worker-2"),
    flags: Callable[[str], list[str]] = lambda name: [],
) -> dict[str, subprocess.Popen[bytes]]:
    """A scheduler, a publisher and ``workers`` (running examples.tasks) as separate
    processes, each logging to ``logs/NAME.log`` and given ``flags(NAME)`` too."""
    processes = {
        "scheduler": cli.popen(
            "scheduler", "--interval", "0.2", *flags("scheduler"), log=logs / "scheduler.log"
        ),
        "publisher": cli.popen(
            "publisher", "--interval", "0.1", *flags("publisher"), log=logs / "publisher.log"
        ),
    }
    for name in workers:
        processes[name] = cli.popen(
            "worker",
            "--tasks",
            "examples.tasks",
            "--worker-id",
            name,
            *flags(name),
            log=logs / f"{name}.log",
        )
    return processes


def run_example_in_production(
    cli: Cli,
    logs: Path,
    *,
    workers: tuple[str, ...] = ("worker-1", "worker-2"),
    flags: Callable[[str], list[str]] = lambda name: [],
) -> tuple[str, dict[str, subprocess.Popen[bytes]]]:
    """The example run to its end by :func:`production_processes`, which are then stopped
    (each must exit 0); the run's id, and the processes."""
    processes = production_processes(cli, logs, workers=workers, flags=flags)
    try:
        run_id: str = cli.json("submit", EXAMPLE, "--input", "rows=8")["run_id"]
        watched = cli("status", run_id, "--watch", "--json", timeout=90)
        assert watched.returncode == 0, watched.stderr
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)
    return run_id, processes


def clean_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWFORGE_")}
    # examples.tasks is imported from the source tree, whatever the working directory.
    # A crash (SIGSEGV) prints every thread's traceback to the test's stderr.
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1", **extra}


def make_cli(directory: Path) -> Cli:
    url = f"sqlite:///{directory / 'flowforge.db'}"
    return Cli(directory, clean_environment(FLOWFORGE_DATABASE_URL=url))


@pytest.fixture
def bare_cli(tmp_path: Path) -> Cli:
    """A CLI on a SQLite file that does not exist yet."""
    return make_cli(tmp_path)


@pytest.fixture
def cli(bare_cli: Cli) -> Cli:
    """A CLI on an initialised SQLite database: migrations are explicit, so only
    `db init`/`db migrate`, `run` and `demo` create the schema."""
    done = bare_cli("db", "init")
    assert done.returncode == 0, done.stderr
    return bare_cli


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """One run of the example, run to the end with `flowforge run`; shared by the
    tests that only read it."""
    cli = make_cli(tmp_path_factory.mktemp("finished"))
    done = cli("run", EXAMPLE, "--tasks", "examples.tasks", "--input", "rows=8", "--workers", "3")
    assert done.returncode == 0, done.stderr
    (run,) = cli.json("runs")
    return cli, run["run_id"]


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The `error:` line on stderr (log lines may precede it), without a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


# --- help and configuration ------------------------------------------------------------


def test_every_command_has_help_with_an_example(cli: Cli) -> None:
    main = cli("--help")
    assert main.returncode == 0
    assert "exit codes:" in main.stdout
    assert "FLOWFORGE_DATABASE_URL" in main.stdout
    for code in (0, 1, 2, 3, 4, 130):
        assert f"\n  {code} " in main.stdout, code
    for command in COMMANDS:
        done = cli(*command, "--help")
        assert done.returncode == 0, command
        assert "example:" in done.stdout, command


def test_with_no_configuration_the_database_is_sqlite_in_dot_flowforge(tmp_path: Path) -> None:
    cli = Cli(tmp_path, clean_environment())
    first, second = cli("db", "init"), cli("db", "init")
    assert first.returncode == second.returncode == 0, first.stderr
    assert f"schema version {SCHEMA_VERSION}, deployment " in second.stdout
    assert (tmp_path / ".flowforge" / "flowforge.db").is_file()


def test_a_flag_overrides_the_environment(bare_cli: Cli, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    done = bare_cli("db", "init", "--database-url", f"sqlite:///{other}")
    assert done.returncode == 0, done.stderr
    assert other.is_file()
    assert not (tmp_path / "flowforge.db").exists()


@pytest.mark.parametrize("command", [["runs"], ["status", "0f0f"], ["submit", EXAMPLE]])
def test_a_command_on_a_missing_sqlite_file_names_it_and_creates_nothing(
    bare_cli: Cli, command: list[str]
) -> None:
    done = bare_cli(*command)
    assert done.returncode == 4
    line = one_line_error(done)
    assert str(bare_cli.cwd / "flowforge.db") in line and "flowforge db init" in line
    assert not (bare_cli.cwd / "flowforge.db").exists()


def test_a_database_without_the_schema_is_refused_naming_the_migrate_command(
    bare_cli: Cli,
) -> None:
    sqlite3.connect(bare_cli.cwd / "flowforge.db").close()  # an empty database file
    done = bare_cli("runs")
    assert done.returncode == 4
    line = one_line_error(done)
    assert "no FlowForge schema" in line and "flowforge db migrate" in line
    migrated = bare_cli("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema version {SCHEMA_VERSION}" in migrated.stdout
    assert bare_cli.json("runs") == []


def test_a_bad_database_url_is_one_line_and_bad_input(cli: Cli) -> None:
    done = cli("runs", "--database-url", "mysql://db.example/flowforge")
    assert done.returncode == 2
    assert "mysql" in one_line_error(done)


def test_an_unreachable_broker_is_one_line_naming_host_and_port(cli: Cli) -> None:
    done = cli("worker", "--tasks", "examples.tasks", "--broker-url", "amqp://u:p@127.0.0.1:1/")
    assert done.returncode == 3
    line = one_line_error(done)
    assert "127.0.0.1:1" in line
    assert "Check --broker-url" in line  # the URL came from the flag: name it


@pytest.mark.parametrize("command", [["worker", "--tasks", "examples.tasks"], ["publisher"]])
def test_worker_and_publisher_need_a_broker(cli: Cli, command: list[str]) -> None:
    done = cli(*command)
    assert done.returncode == 2
    line = one_line_error(done)
    assert "FLOWFORGE_BROKER_URL" in line
    assert "flowforge run" in line


def test_a_task_module_that_does_not_import_is_named(cli: Cli) -> None:
    done = cli("run", EXAMPLE, "--tasks", "no_such_tasks_module")
    assert done.returncode == 2
    assert "no_such_tasks_module" in one_line_error(done)


# --- running workflows -----------------------------------------------------------------


def test_run_succeeds_and_the_history_shows_the_retry(finished: tuple[Cli, str]) -> None:
    cli, run_id = finished
    entries = cli.json("history", run_id)
    claims = Counter(e["task_key"] for e in entries if e["transition"] == "claim")
    successes = Counter(e["task_key"] for e in entries if e["transition"] == "succeed")
    del successes[None]  # the run's own "succeed"
    assert successes == dict.fromkeys(TASK_KEYS, 1)
    assert claims == {**dict.fromkeys(TASK_KEYS, 1), "enrich": 2}
    assert all(e["actor"] and e["at"] for e in entries)
    # The embedded workers are named per invocation: the log tells `run`s apart.
    claimers = {e["actor"] for e in entries if e["transition"] == "claim"}
    assert claimers and all(re.fullmatch(r"w\d+-[0-9a-f]{4}", a) for a in claimers)
    assert [e["target"] for e in entries if e["aggregate"] == "WorkflowRun"][-1] == "succeeded"


def test_status_runs_and_history_show_the_finished_run(finished: tuple[Cli, str]) -> None:
    cli, run_id = finished
    status = cli.json("status", run_id[:8])
    assert status["state"] == "succeeded"
    assert {t["task_key"]: t["attempt"] for t in status["tasks"]}["enrich"] == 2
    text = cli("status", run_id)
    assert text.returncode == 0
    assert "enrich" in text.stdout and "2/3" in text.stdout
    listed = cli("runs")
    assert run_id[-8:] in listed.stdout and "5 succeeded" in listed.stdout
    task_history = cli("history", f"{run_id[:8]}/enrich")
    assert task_history.returncode == 0
    assert "schedule_retry" in task_history.stdout and "ConnectionError" in task_history.stdout
    watched = cli("status", run_id, "--watch")
    assert watched.returncode == 0 and "succeeded" in watched.stdout


def test_every_line_of_run_runs_status_and_history_fits_80_columns(
    finished: tuple[Cli, str],
) -> None:
    cli, run_id = finished
    for command in (
        ["runs"],
        ["status", run_id],
        ["history", run_id],
        ["history", f"{run_id}/enrich"],
    ):
        done = cli(*command)
        assert done.returncode == 0, done.stderr
        wide = [line for line in done.stdout.splitlines() if len(line) > 80]
        assert not wide, (command, wide)


def test_the_run_line_and_status_say_the_same_times(finished: tuple[Cli, str]) -> None:
    """Both show the time from submission and the time running (issue #34 item 6)."""
    cli, run_id = finished
    run = cli.json("status", run_id)
    status = cli("status", run_id).stdout
    (took,) = re.findall(r"took (\S+ \(\S+ running\))", status)
    assert took.startswith(timefmt.duration(_seconds(run["created_at"], run["finished_at"])))


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def test_short_ids_printed_paste_back_even_for_ids_made_in_the_same_minute(cli: Cli) -> None:
    """Ids are time-ordered: ids made within a minute share their first 8+ digits, so
    the short form FlowForge prints is an id's random end (its last 8 hex digits)."""
    submitted = [cli("submit", EXAMPLE, "--input", f"rows={n}") for n in (1, 2)]
    assert all(done.returncode == 0 for done in submitted), submitted
    listed = cli("runs").stdout.splitlines()[1:]
    shorts = [line.split()[0] for line in listed]
    assert len(shorts) == 2 and all(len(short) == 8 for short in shorts)
    for short, done in zip(shorts, reversed(submitted), strict=True):
        status = cli.json("status", short)
        assert status["run_id"] == done.stdout.strip()
        assert str(status["run_id"]).endswith(short)
        for task in status["tasks"]:
            why = cli.json("why", str(task["task_run_id"])[-8:])
            assert why["task_key"] == task["task_key"]
    ambiguous = cli("why", str(status["tasks"][0]["task_run_id"])[:8])
    assert ambiguous.returncode == 2
    assert "short form" in one_line_error(ambiguous)


def test_why_explains_a_finished_task_and_the_past_from_the_log(
    finished: tuple[Cli, str],
) -> None:
    cli, run_id = finished
    now = cli.json("why", f"{run_id}/enrich")
    assert now["reason"] == "succeeded"
    assert "after 2 attempts" in now["headline"]
    entries = cli.json("history", run_id)
    retry = next(e for e in entries if e["transition"] == "schedule_retry")
    in_backoff = cli.json("why", f"{run_id}/enrich", "--at", retry["at"])
    assert in_backoff["reason"] == "retry_backoff", in_backoff
    assert in_backoff["from_log"] is True
    waiting = cli.json("why", f"{run_id}/load", "--at", retry["at"])
    assert waiting["reason"] == "waiting_for_upstream"
    # What else load waited for at that moment depends on how the other tasks
    # interleaved with enrich's retry; enrich's own backoff is read from the log.
    assert waiting["headline"].startswith("load is waiting for ")
    assert "enrich (retrying, attempt 2" in waiting["headline"], waiting["headline"]
    text = cli("why", f"{run_id}/load", "--at", retry["at"])
    assert text.returncode == 0 and "(the event log)" in text.stdout


def test_db_rebuild_rebuilds_and_verifies_the_tables(finished: tuple[Cli, str]) -> None:
    cli, _ = finished
    done = cli("db", "rebuild")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 workflow runs and 5 task runs" in done.stdout
    assert "verified 6 rows against the log: all match" in done.stdout


#: A database edited behind FlowForge's back: a trigger that changes one column of one
#: row as the rebuild writes it (the stored unit: a count, or integer microseconds).
#: Each: the table, the trigger's event and condition, the column, the change.
#: The rebuild writes each row once, folded from its events (an INSERT).
HAND_EDITS = {
    "attempt": ("task_runs", "INSERT", "NEW.task_key = 'load'", "attempt", 1),
    "updated_at": ("task_runs", "INSERT", "NEW.task_key = 'load'", "updated_at", 1),
    "created_at": ("workflow_runs", "INSERT", "1", "created_at", -1),
}


def shown(value: int, column: str) -> str:
    """How the verifier writes a stored value of ``column`` (SQLite's unit)."""
    if column.endswith("_at"):
        return timefmt.iso(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value))
    return repr(value)


@pytest.mark.parametrize("edit", list(HAND_EDITS))
def test_db_rebuild_exits_1_naming_the_row_and_field_the_log_disagrees_with(
    finished: tuple[Cli, str], tmp_path: Path, edit: str
) -> None:
    """The verification is not a formality: a row the rebuild wrote that is not its
    log's, by one attempt or by one microsecond of its created_at or updated_at, is
    named with its field, and the command fails."""
    source, _ = finished
    cli = make_cli(tmp_path)
    path = tmp_path / "flowforge.db"
    table, when, condition, column, change = HAND_EDITS[edit]
    with (
        closing(sqlite3.connect(source.cwd / "flowforge.db")) as original,
        closing(sqlite3.connect(path)) as copy,
    ):
        original.backup(copy)  # the shared run's database, edited in a copy of its own
        # As the log has it: the rows agree with the log before the edit.
        (row_id, logged) = copy.execute(
            f"SELECT id, {column} FROM {table} WHERE {condition.replace('NEW.', '')}"
        ).fetchone()
        # Fired once per row the rebuild writes (an UPDATE trigger, were a row written
        # event by event: after each of its events, not by its own UPDATE, which leaves
        # the version as it is).
        guard = " AND NEW.version <> OLD.version" if when == "UPDATE" else ""
        with copy:
            copy.execute(
                f"CREATE TRIGGER hand_edit AFTER {when} ON {table} WHEN {condition}{guard} "
                f"BEGIN UPDATE {table} SET {column} = NEW.{column} + {change} "
                "WHERE id = NEW.id; END"
            )

    done = cli("db", "rebuild")

    assert done.returncode == exits.EXIT_FAILED, done.stdout + done.stderr
    assert "rebuilt 1 workflow runs and 5 task runs" in done.stdout
    assert "verified 6 rows against the log: 1 differences" in done.stdout, done.stdout
    row = f"workflow run {row_id}" if table == "workflow_runs" else f"task run {row_id} (load)"
    expected = (
        f"  {row}: {column} is {shown(logged + change, column)} in the table but "
        f"{shown(logged, column)} in the log"
    )
    assert expected in done.stdout.splitlines(), done.stdout


def test_a_failed_run_exits_1_with_the_task_errors(cli: Cli) -> None:
    (cli.cwd / "doomed_tasks.py").write_text(FAILING_MODULE)
    done = cli("run", "doomed_tasks:WORKFLOW", "--workers", "1")
    assert done.returncode == 1, done.stderr
    assert "first failed after 2 attempt(s): ValueError: disk full on attempt 2" in done.stderr
    (run,) = cli.json("runs")
    assert cli("status", run["run_id"]).returncode == 1
    after = cli.json("why", f"{run['run_id']}/after")
    assert after["reason"] == "cancelled"
    assert "first, which it depends on, failed for good" in after["headline"]


def test_demo_runs_the_example_and_shows_its_history(tmp_path: Path) -> None:
    done = Cli(tmp_path, clean_environment())("demo")
    assert done.returncode == 0, done.stderr
    assert "succeeded in" in done.stdout
    assert "history (the audit log)" in done.stdout
    assert "schedule_retry" in done.stdout
    assert (tmp_path / ".flowforge" / "flowforge.db").is_file()  # the default, kept


def test_the_demo_runs_the_same_dag_as_the_example_file() -> None:
    assert load_definition(EXAMPLE) == demo.DEFINITION


def test_submit_then_why_names_what_the_run_waits_for(cli: Cli) -> None:
    submitted = cli.json("submit", EXAMPLE, "-i", "rows=3", "-i", "label=nightly")
    assert submitted["created"] is True and submitted["state"] == "pending"
    run_id = submitted["run_id"]
    assert cli.json("status", run_id)["inputs"] == {"rows": 3, "label": "nightly"}
    # Pending until a worker claims its first task; no scheduler needed to start it.
    extract = cli.json("why", f"{run_id}/extract")
    assert extract["reason"] == "dispatch_pending"  # no publisher runs here
    clean = cli.json("why", f"{run_id}/clean")
    assert clean["reason"] == "waiting_for_upstream"
    assert clean["headline"] == "clean is waiting for 1 upstream task: extract (ready, " + (
        "waiting for a worker)"
    )


def test_the_same_idempotency_key_returns_the_existing_run(cli: Cli) -> None:
    first = cli("submit", EXAMPLE, "--idempotency-key", "nightly-2026-01-31")
    second = cli("submit", EXAMPLE, "--idempotency-key", "nightly-2026-01-31")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert "already exists" in second.stderr and "created nothing" in second.stderr
    again = cli.json("submit", EXAMPLE, "--idempotency-key", "nightly-2026-01-31")
    assert again["created"] is False
    assert len(cli.json("runs")) == 1


def test_an_idempotency_key_reused_with_other_inputs_is_refused_naming_them(cli: Cli) -> None:
    first = cli("submit", EXAMPLE, "--idempotency-key", "k", "--input", "rows=3")
    assert first.returncode == 0, first.stderr
    other = cli("submit", EXAMPLE, "--idempotency-key", "k", "--input", "rows=4", "--input", "x=1")
    assert other.returncode == exits.EXIT_REFUSED
    line = one_line_error(other)
    assert "idempotency key 'k' belongs to run" in line
    assert "the inputs differ (changed rows; added x)" in line
    assert len(cli.json("runs")) == 1


def test_cancel_a_pending_run_then_refuse_to_cancel_it_again(cli: Cli) -> None:
    run_id = cli("submit", EXAMPLE).stdout.strip()
    done = cli("cancel", run_id)
    assert done.returncode == 0, done.stderr
    assert "cancelled run" in done.stdout
    assert cli("status", run_id).returncode == 1
    assert cli.json("why", f"{run_id}/load")["reason"] == "cancelled"
    again = cli("cancel", run_id)
    assert again.returncode == 4
    assert "already cancelled" in one_line_error(again)


def test_cancelling_a_finished_run_is_refused(finished: tuple[Cli, str]) -> None:
    cli, run_id = finished
    done = cli("cancel", run_id)
    assert done.returncode == 4
    assert "already succeeded" in one_line_error(done)


# --- bad input -------------------------------------------------------------------------


def test_an_invalid_workflow_file_names_the_file_and_the_field(cli: Cli) -> None:
    bad = cli.cwd / "bad.toml"
    bad.write_text('name = "bad"\n[[tasks]]\nkey = "a"\ntype = "a"\ndepends_on = ["nope"]\n')
    done = cli("submit", str(bad))
    assert done.returncode == 2
    line = one_line_error(done)
    assert "bad.toml" in line and "tasks[0].depends_on" in line and "'nope'" in line
    assert cli.json("runs") == []


@pytest.mark.parametrize(
    "command",
    [
        ["status", "0f0f0f0f-0000-4000-8000-000000000000"],
        ["history", "0f0f0f0f-0000-4000-8000-000000000000"],
        ["cancel", "0f0f0f0f"],
        ["why", "0f0f0f0f-0000-4000-8000-000000000000/extract"],
    ],
)
def test_an_unknown_run_id_is_bad_input(cli: Cli, command: list[str]) -> None:
    done = cli(*command)
    assert done.returncode == 2
    assert "0f0f0f0f" in one_line_error(done)


def test_run_refuses_a_task_type_no_handler_is_registered_for(cli: Cli) -> None:
    workflow = cli.cwd / "mystery.json"
    workflow.write_text(
        json.dumps(
            {
                "name": "mystery",
                "tasks": [{"key": "a", "type": "extract"}, {"key": "b", "type": "divine"}],
            }
        )
    )
    done = cli("run", str(workflow), "--tasks", "examples.tasks")
    assert done.returncode == 2
    line = one_line_error(done)
    assert "'b' (type 'divine')" in line
    assert "registered types: clean, enrich, extract, load, score" in line
    assert cli.json("runs") == []  # refused before submitting


def test_a_database_of_a_newer_schema_version_is_refused(cli: Cli) -> None:
    assert cli("db", "init").returncode == 0
    with sqlite3.connect(cli.cwd / "flowforge.db") as conn:
        conn.execute("INSERT INTO flowforge_schema (version, applied_at) VALUES (99, 0)")
    done = cli("runs")
    assert done.returncode == 4
    line = one_line_error(done)
    assert "schema version 99" in line and "newer FlowForge" in line


# --- PostgreSQL and RabbitMQ, separate processes (the fixture: tests/e2e/conftest.py) --


@pytest.mark.postgres
@pytest.mark.rabbitmq
@pytest.mark.parametrize("command", [["publisher"], ["worker", "--tasks", "examples.tasks"]])
def test_worker_and_publisher_stop_on_a_classic_queue_with_the_migration_steps(
    production: Cli, command: list[str]
) -> None:
    cli = production
    assert cli("db", "init").returncode == 0
    assert cli("submit", EXAMPLE).returncode == 0  # a pending dispatch for the publisher
    connection = pika.BlockingConnection(pika.URLParameters(servers.RABBITMQ_URL))
    try:  # the first task's queue as a release before quorum queues declared it: classic
        extract = f"{cli.env['FLOWFORGE_DISPATCH_QUEUE']}.extract"
        connection.channel().queue_declare(extract, durable=True)
    finally:
        connection.close()
    done = cli(*command, timeout=60)  # retrying forever would time out here
    assert done.returncode == exits.EXIT_REFUSED
    assert "Traceback" not in done.stderr
    assert "error: The queue" in done.stderr
    for step in ("1. Stop the worker and the publisher", "3. Delete the queue", "4. Start"):
        assert step in done.stderr


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_separate_processes_on_postgres_and_rabbitmq_run_the_example(
    production: Cli, tmp_path: Path
) -> None:
    cli = production
    assert cli("db", "init").returncode == 0
    processes = production_processes(cli, tmp_path)
    try:
        run_id = cli.json("submit", EXAMPLE, "--input", "rows=8")["run_id"]
        watched = cli("status", run_id, "--watch", "--json", timeout=90)
        logs = {name: (tmp_path / f"{name}.log").read_text() for name in processes}
        assert watched.returncode == 0, (watched.stderr, logs)
        assert json.loads(watched.stdout)["state"] == "succeeded"
    finally:
        codes = helpers.stop_all(processes, timeout=15)
    assert codes == dict.fromkeys(processes, 0)
    entries = cli.json("history", run_id)
    successes = Counter(e["task_key"] for e in entries if e["transition"] == "succeed")
    del successes[None]  # the run's own "succeed"
    claims = Counter(e["task_key"] for e in entries if e["transition"] == "claim")
    assert successes == dict.fromkeys(TASK_KEYS, 1)
    assert claims == {**dict.fromkeys(TASK_KEYS, 1), "enrich": 2}
    workers = {e["actor"] for e in entries if e["transition"] == "claim"}
    assert workers <= {"worker-1", "worker-2"}


# --- the documentation -------------------------------------------------------------------


def test_the_docs_describe_every_command_and_exit_code() -> None:
    text = DOC.read_text()
    documented = set(re.findall(r"^### flowforge ([a-z]+(?: [a-z]+)?)", text, re.MULTILINE))
    groups = (["db"], ["broker"], ["schedule"], ["limit"])
    assert documented == {" ".join(command) for command in COMMANDS if command not in groups}
    exit_section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", exit_section, re.MULTILINE)}
    defined = {v for k, v in vars(exits).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert codes == defined


def test_the_python_api_example_in_the_docs_runs(tmp_path: Path) -> None:
    (block,) = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "succeeded"
