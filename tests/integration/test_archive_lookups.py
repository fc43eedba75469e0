"""An archived run asked about by one of its task runs' ids (`why TASK_ID`), and a restore
that has nothing to do (the same file twice; a run whose idempotency key a newer run
holds): each says so plainly and changes nothing. Both backends (the ``app`` fixture)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from flowforge.cli import archive as archive_cli
from flowforge.cli import ids
from flowforge.cli.exits import EXIT_BAD_INPUT
from flowforge.cli.main import main
from tests.helpers import task_id, work
from tests.integration.test_archive import finished_runs, snapshot

NOW = timedelta(0)
ONE = {"name": "one", "tasks": [{"key": "a", "type": "work"}]}


def test_a_task_ids_archived_run_is_named_with_its_file_by_why_and_status(
    app: FlowForge, tmp_path: Path
) -> None:
    done = finished_runs(app)[0]
    task = task_id(app, done, "b")
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)

    # `why TASK_ID` and every other command that takes a task run resolve it here.
    for typed in (str(task), task.hex[-8:]):
        with pytest.raises(errors.ArchivedRunError) as caught:
            ids.resolve_task(app, typed)
        message = str(caught.value)
        assert f"task run {task}" in message
        assert f"workflow run {done}" in message
        assert f"flowforge db restore {file}" in message
    # A task run no archive holds is unknown, as before.
    with pytest.raises(errors.UnknownTaskRunError):
        ids.resolve_task(app, "0123abcd")


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_why_and_history_of_a_task_id_of_an_archived_run_name_its_file_and_exit_2(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app: FlowForge = request.getfixturevalue("pg_app" if backend == "postgres" else "sqlite_app")
    url: str = request.getfixturevalue(f"{backend}_url")
    done = finished_runs(app)[0]
    task = task_id(app, done, "b")
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    capsys.readouterr()

    for words in (("why", str(task)), ("why", task.hex[-8:]), ("history", str(task))):
        code = main([*words, "--database-url", url])
        err = capsys.readouterr().err
        assert code == EXIT_BAD_INPUT, (words, err)
        assert f"task run {task}" in err
        assert f"flowforge db restore {file}" in err


def test_a_task_id_whose_archive_file_is_gone_is_an_unknown_task_run(
    app: FlowForge, tmp_path: Path
) -> None:
    done = finished_runs(app)[0]
    task = task_id(app, done, "a")
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    file.unlink()

    with pytest.raises(errors.UnknownTaskRunError):
        ids.resolve_task(app, str(task))


def test_restoring_a_file_a_second_time_changes_nothing_and_says_so(
    app: FlowForge, tmp_path: Path
) -> None:
    ended = finished_runs(app)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    app.restore_runs(file)
    before, events = snapshot(app, ended), app.database_stats().events

    again = app.restore_runs(file)

    assert (again.restored, again.already_live, again.key_taken) == (0, 3, ())
    assert archive_cli.restore_lines(again) == [
        f"nothing to restore: all 3 runs of {file} are live already (restored before); "
        f"nothing was changed"
    ]
    assert snapshot(app, ended) == before
    assert app.database_stats().events == events


def test_a_run_whose_key_a_newer_run_holds_stays_archived_and_the_restore_says_so(
    app: FlowForge, tmp_path: Path
) -> None:
    old = app.start_workflow_run(ONE, {"n": 1}, idempotency_key="nightly")
    app.advance_workflow_run(old)
    work(app, old, "a")
    app.advance_workflow_run(old)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    # The key went with its run: a new run may take it meanwhile.
    new = app.start_workflow_run(ONE, {"n": 2}, idempotency_key="nightly")
    assert new != old
    kept, events = snapshot(app, [new]), app.database_stats().events

    for _ in range(2):  # and again: the same answer, nothing changed
        report = app.restore_runs(file)
        assert (report.restored, report.already_live, report.key_taken) == (0, 0, (old,))
        lines = archive_cli.restore_lines(report)
        assert any("NOT restored" in line and str(old) in line for line in lines)
        assert snapshot(app, [new]) == kept
        assert app.database_stats().events == events
        with pytest.raises(errors.ArchivedRunError, match=str(file)):
            app.get_workflow_run(old)
