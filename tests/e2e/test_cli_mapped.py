"""A mapped task (``map_over``) through the CLI on the embedded default: `why` of a
mapped task not yet expanded and of its reducer, `status` grouping the elements (text
and JSON), `run` to the end, and the plain progress log's one line per change of a
group (never a line per element)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_cli import ROOT, Cli, make_cli

EXAMPLE = str(ROOT / "examples" / "mapped.toml")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = make_cli(tmp_path)
    done = cli("db", "init")
    assert done.returncode == 0, done.stderr
    return cli


def test_why_and_status_explain_and_group_a_mapped_task(cli: Cli) -> None:
    done = cli("submit", EXAMPLE, "--input", "count=12")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()

    why = cli("why", f"{run_id}/process")
    assert why.returncode == 0, why.stderr
    assert "waits for list_files" in why.stdout
    assert "to return its list" in why.stdout
    reducer = cli.json("why", f"{run_id}/summarize")
    assert reducer["reason"] == "waiting_for_mapped_task"
    assert "waits for list_files to return its list" in reducer["headline"]

    ran = cli("run", "--resume", run_id, "--tasks", "examples.mapped_tasks", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "process[0..11]:" in ran.stdout
    assert "process[3]:" not in ran.stdout  # grouped, not a line per element

    status = cli("status", run_id)
    assert status.returncode == 0, status.stderr
    assert "process[0..11]: 12 succeeded" in status.stdout
    assert "process[5] " not in status.stdout
    every = cli("status", run_id, "--all")
    assert "process[5]" in every.stdout
    facts = cli.json("status", run_id)
    (mapped,) = facts["mapped_tasks"]
    assert (mapped["key"], mapped["elements"], mapped["state"]) == ("process", 12, "succeeded")
    assert mapped["counts"] == {"succeeded": 12}
    summarize = next(t for t in facts["tasks"] if t["task_key"] == "summarize")
    assert len(summarize["result"]["files"]) == 12
    element = cli("why", f"{run_id}/process[1]")
    assert element.returncode == 0, element.stderr
    assert "process[1]" in element.stdout
    assert "element 1 of 12 of the mapped task process (over list_files's list)" in element.stdout
    assert '"file-1.csv"' in element.stdout
    assert Path(EXAMPLE).exists()


def test_rerun_says_what_it_carries_over_with_the_elements_grouped(cli: Cli) -> None:
    ran = cli(
        "run", EXAMPLE, "--tasks", "examples.mapped_tasks", "--input", "count=8", timeout=120
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (old,) = cli.json("runs")

    again = cli("rerun", old["run_id"], "--from", "process[3]", "--detach")

    assert again.returncode == 0, again.stderr
    assert "carried over: list_files, process[0..7] (7 elements)" in again.stderr
    assert "running again: summarize, process[3]" in again.stderr
    whole = cli("rerun", old["run_id"], "--from", "list_files", "--detach")
    assert whole.returncode == 0, whole.stderr
    assert "carried over: nothing" in whole.stderr
    assert "process (once list_files returns its list)" in whole.stderr


def test_history_streams_an_expansion_as_one_line_and_json_keeps_every_event(cli: Cli) -> None:
    ran = cli(
        "run", EXAMPLE, "--tasks", "examples.mapped_tasks", "--input", "count=40", timeout=120
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run,) = cli.json("runs")

    history = cli("history", run["run_id"])

    assert history.returncode == 0, history.stderr
    assert "process[0..39] (40 elements)" in history.stdout
    assert "create (ready)" in history.stdout
    events = cli.json("history", run["run_id"])
    created = [e for e in events if e["source"] is None and "[" in (e["task_key"] or "")]
    assert len(created) == 40


def test_runs_counts_a_mapped_task_pending_until_expanded_then_its_elements(cli: Cli) -> None:
    done = cli("submit", EXAMPLE, "--input", "count=12")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    (waiting,) = cli.json("runs")
    # list_files ready; process (no task run yet) and summarize pending.
    assert waiting["task_states"] == {"ready": 1, "pending": 2}
    assert "1 ready, 2 pending" in cli("runs").stdout

    ran = cli("run", "--resume", run_id, "--tasks", "examples.mapped_tasks", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr

    (finished,) = cli.json("runs")
    assert finished["task_states"] == {"succeeded": 14}  # list_files, 12 elements, summarize
    listed = cli("runs")
    assert listed.returncode == 0, listed.stderr
    assert "14 succeeded" in listed.stdout
