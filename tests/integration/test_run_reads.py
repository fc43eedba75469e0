"""Reads of one run at any size (issue #50), on both backends: the app's queries the CLI
and the UI call (``run_summary``, ``task_runs_page``, ``stream_run_history``), and the
commands on them (``status`` summary, ``--all``, ``--state``, ``--limit/--after``,
``history --task/--since/--limit``, ``why``), run in this process against the database.
No test times anything: bench/size.py measures.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from uuid import UUID

import pytest

from flowforge.app import as_of
from flowforge.app.results import AuditEntry
from flowforge.app.service import FlowForge
from flowforge.app.task_run_commands import Finish
from flowforge.cli import summary
from flowforge.cli.main import main
from tests import helpers

#: More than summary.SMALL_RUN: a run `status` summarises.
WIDE = 40


def wide(n: int) -> dict[str, object]:
    """A root and ``n - 1`` tasks after it."""
    tasks: list[dict[str, object]] = [{"key": "root", "type": "work"}]
    tasks += [{"key": f"t{i:02d}", "type": "work", "depends_on": ["root"]} for i in range(n - 1)]
    return {
        "name": "wide",
        "retry": {"max_attempts": 1},
        "on_failure": "finish_branches",
        "tasks": tasks,
    }


@pytest.fixture(params=["postgres", "sqlite"])
def url(request: pytest.FixtureRequest) -> str:
    """A database on each backend, empty, migrated."""
    if request.param == "postgres":
        app: FlowForge = request.getfixturevalue("pg_app")
        url: str = request.getfixturevalue("postgres_url")
    else:
        app = request.getfixturevalue("sqlite_app")
        url = request.getfixturevalue("sqlite_url")
    del app  # the fixture emptied (or created) the database
    return url


@pytest.fixture
def app(url: str) -> Iterator[FlowForge]:
    with FlowForge(url) as opened:
        yield opened


@pytest.fixture
def run_id(app: FlowForge) -> UUID:
    """A run of WIDE tasks: root succeeded; t00-t09 succeeded, t10-t12 failed, t13-t14
    running, the rest ready."""
    run = app.start_workflow_run(wide(WIDE))
    helpers.work(app, run, "root")
    app.schedule_once()
    ids = {t.task_key: t.id for t in app.task_runs(run)}
    claimed, _ = app.claim_task_runs_and_their_runs([ids[f"t{i:02d}"] for i in range(15)], "w1")
    finishes = [
        Finish(c.id, c.fencing_token, "succeed" if i < 10 else "fail", error=_error(i))
        for i, c in enumerate(claimed[:13])
        if c is not None
    ]
    assert all(app.finish_task_runs(finishes))
    return run


def _error(i: int) -> dict[str, str] | None:
    return None if i < 10 else {"type": "Boom", "message": f"t{i:02d} failed"}


def cli(capsys: pytest.CaptureFixture[str], url: str, *words: str) -> tuple[int, list[str]]:
    code = main([*words, "--database-url", url])
    return code, capsys.readouterr().out.splitlines()


# --- the app's queries ---------------------------------------------------------------------


def test_a_summary_counts_every_state_and_names_the_tasks_to_act_on(
    app: FlowForge, run_id: UUID
) -> None:
    found = app.run_summary(run_id, per_state=2)
    assert found.counts == {"succeeded": 11, "failed": 3, "running": 2, "ready": 24}
    assert found.total == WIDE
    assert list(found.notable) == ["failed", "running", "ready"]
    assert [t.task_key for t in found.notable["failed"]] == ["t10", "t11"]
    assert {t.state for ts in found.notable.values() for t in ts} == {"failed", "running", "ready"}
    assert all(len(ts) <= 2 for ts in found.notable.values())


def test_pages_of_tasks_cover_the_run_once_in_key_order(app: FlowForge, run_id: UUID) -> None:
    seen: list[str] = []
    after = ""
    while page := app.task_runs_page(run_id, after=after, limit=7):
        seen += [t.task_key for t in page]
        after = page[-1].task_key
    assert seen == sorted(t.task_key for t in app.task_runs(run_id))
    failed = app.task_runs_page(run_id, state="failed", limit=100)
    assert [t.task_key for t in failed] == ["t10", "t11", "t12"]
    assert [t.task_key for t in app.task_runs_page(run_id, state="failed", after="t10")] == [
        "t11",
        "t12",
    ]


def test_a_streamed_history_is_the_runs_whole_log_in_the_logs_order(
    app: FlowForge, run_id: UUID
) -> None:
    streamed = list(app.stream_run_history(run_id))
    assert len(streamed) == app.run_history_count(run_id)

    # The same entries as the whole read (the run's creation built from its row too).
    def by_event(e: AuditEntry) -> tuple[UUID, int]:
        return e.aggregate_id, e.version

    assert sorted(streamed, key=by_event) == sorted(app.run_history(run_id), key=by_event)
    assert streamed[0].aggregate == "WorkflowRun" and streamed[0].transition == "create"
    # Each aggregate's events come in its version order.
    last: dict[UUID, int] = {}
    for entry in streamed:
        assert entry.version == last.get(entry.aggregate_id, 0) + 1
        last[entry.aggregate_id] = entry.version
    assert all(e.task_key is not None for e in streamed if e.aggregate == "TaskRun")


def test_a_streamed_history_keeps_to_its_run(app: FlowForge, run_id: UUID) -> None:
    other = app.start_workflow_run(wide(3))
    helpers.work(app, other, "root")
    ids = {e.aggregate_id for e in app.stream_run_history(run_id)}
    assert ids == {run_id, *(t.id for t in app.task_runs(run_id))}


def test_a_history_narrowed_by_time_and_count(app: FlowForge, run_id: UUID) -> None:
    whole = list(app.stream_run_history(run_id))
    since = whole[len(whole) // 2].at
    later = list(app.stream_run_history(run_id, since=since))
    assert later == [e for e in whole if e.at >= since]
    assert list(app.stream_run_history(run_id, limit=5)) == whole[:5]


# --- the commands ------------------------------------------------------------------------


def test_status_of_a_big_run_is_a_summary_on_one_screen(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    code, lines = cli(capsys, url, "status", str(run_id))
    assert code == 0
    assert len(lines) <= summary.MAX_LINES
    text = "\n".join(lines)
    assert "tasks: 11 succeeded, 2 running, 24 ready, 3 failed (40 tasks)" in text
    assert "failed (3):" in text and "running, the longest running first (2):" in text
    assert "ready, waiting for a worker, the longest waiting first (5 of 24):" in text
    assert "t10" in text and "t00" not in text  # a succeeded task is only counted
    assert f"flowforge status {run_id} --state" in text


def test_status_all_lists_every_task(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    _, lines = cli(capsys, url, "status", str(run_id), "--all")
    listed = {line.split()[0] for line in lines if line.startswith(("root", "t"))}
    assert listed == {"root", *(f"t{i:02d}" for i in range(WIDE - 1))}


def test_status_of_a_small_run_lists_it_whole(
    capsys: pytest.CaptureFixture[str], app: FlowForge, url: str
) -> None:
    small = app.start_workflow_run(wide(summary.SMALL_RUN))
    _, lines = cli(capsys, url, "status", str(small))
    assert sum(line.startswith("t") for line in lines) == summary.SMALL_RUN - 1


def test_status_state_lists_the_tasks_in_that_state_with_the_next_page(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    _, lines = cli(capsys, url, "status", str(run_id), "--state", "ready", "--limit", "20")
    rows = [line.split()[0] for line in lines if line.startswith("t")]
    assert rows == [f"t{i:02d}" for i in range(15, 35)]
    assert lines[-1] == (
        f"next page: `flowforge status {run_id} --state ready --limit 20 --after t34`"
    )
    _, lines = cli(capsys, url, "status", str(run_id), "--state", "ready", "--after", "t34")
    assert [line.split()[0] for line in lines if line.startswith("t")] == [
        f"t{i:02d}" for i in range(35, 39)
    ]
    assert lines[-1] == "(the last page)"


def test_status_json_pages_follow_each_other_to_the_end(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    keys: list[str] = []
    after: str | None = ""
    while after is not None:
        _, lines = cli(
            capsys, url, "status", str(run_id), "--json", "--limit", "15", "--after", after
        )
        page = json.loads("\n".join(lines))
        assert page["task_states"] == {"failed": 3, "ready": 24, "running": 2, "succeeded": 11}
        keys += [t["task_key"] for t in page["tasks"]]
        after = page["next_after"]
    assert keys == ["root", *(f"t{i:02d}" for i in range(WIDE - 1))]


def test_status_state_refuses_a_state_that_is_not_one(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    with pytest.raises(SystemExit):
        main(["status", str(run_id), "--state", "done", "--database-url", url])
    assert "invalid choice: 'done'" in capsys.readouterr().err


def test_history_task_since_and_limit_narrow_it(
    capsys: pytest.CaptureFixture[str], app: FlowForge, url: str, run_id: UUID
) -> None:
    _, lines = cli(capsys, url, "history", str(run_id), "--task", "t10")
    assert (
        lines[0].startswith("history of task run ") and "(t10, failed): 4 transitions" in lines[0]
    )
    assert {line.split()[1] for line in lines[2:] if line[:1].isdigit()} == {"t10"}
    whole = list(app.stream_run_history(run_id))
    since = whole[-3].at.isoformat()
    _, lines = cli(capsys, url, "history", str(run_id), "--since", since, "--limit", "2")
    assert lines[0].endswith(f"; showing those since {since.replace('+00:00', 'Z')}, at most 2")
    assert sum(line[:1].isdigit() for line in lines[2:]) == 2
    code, lines = cli(capsys, url, "history", str(run_id), "--json", "--limit", "3")
    assert code == 0 and len(json.loads("\n".join(lines))) == 3


def test_history_task_of_a_task_run_is_refused(
    capsys: pytest.CaptureFixture[str], url: str, run_id: UUID
) -> None:
    assert main(["history", f"{run_id}/t10", "--task", "t11", "--database-url", url]) != 0
    assert "--task KEY names a task of a run" in capsys.readouterr().err


def test_why_names_the_failed_upstream_of_a_task_without_reading_the_run(
    capsys: pytest.CaptureFixture[str], app: FlowForge, url: str
) -> None:
    chain = app.start_workflow_run(
        {
            "name": "chain",
            "retry": {"max_attempts": 1},
            "on_failure": "finish_branches",
            "tasks": [
                {"key": "a", "type": "work"},
                {"key": "b", "type": "work", "depends_on": ["a"]},
                {"key": "c", "type": "work", "depends_on": ["b"]},
                {"key": "side", "type": "work"},
            ],
        }
    )
    helpers.work(app, chain, "a", "fail")
    app.schedule_once()
    _, lines = cli(capsys, url, "why", f"{chain}/c")
    assert "a, which it depends on, failed for good" in lines[0], lines


def test_the_default_reads_of_a_big_run_never_read_all_its_tasks_or_its_whole_log(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    run_id: UUID,
) -> None:
    def whole_run(*_: object, **__: object) -> None:
        raise AssertionError("read the whole run")

    for name in ("task_runs", "run_history"):
        monkeypatch.setattr(FlowForge, name, whole_run)
    for words in (
        ["status", str(run_id)],
        ["status", str(run_id), "--state", "ready"],
        ["history", str(run_id), "--limit", "3"],
        ["history", str(run_id), "--task", "t20"],
        ["why", f"{run_id}/t20"],
        ["why", f"{run_id}/t20", "--at", "2100-01-01T00:00:00Z"],
        ["why", f"{run_id}/t10"],
    ):
        _, lines = cli(capsys, url, *words)
        assert lines, words


def test_a_page_of_tasks_as_of_a_moment_is_what_the_log_says_then(
    app: FlowForge, run_id: UUID
) -> None:
    whole = list(app.stream_run_history(run_id))
    for moment in (whole[0].at, whole[len(whole) // 2].at, whole[-1].at):
        then = as_of.fold(whole, moment)
        page = as_of.task_page_as_of(app, run_id, moment, limit=WIDE)
        assert [p.task.task_key for p in page] == sorted(t.task_key for t in app.task_runs(run_id))
        for one in page:
            expected = then.last.get(one.task.id)
            assert one.state == (expected.target if expected else None), one.task.task_key
            assert one.then is None or one.then.version == expected.version  # type: ignore[union-attr]
