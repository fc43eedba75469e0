"""`flowforge db archive` / `db restore` (app/archive.py), on both backends: a round
trip gives back every event byte for byte and every row as it was; live runs are never
touched; a damaged file is refused with nothing deleted or restored; two archivers
archive each run once; a restored run can be run again."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from flowforge import errors
from flowforge.app import archive, archive_file
from flowforge.app.service import FlowForge
from flowforge.cli import db
from flowforge.projections.writes.archive import RunRecord
from tests.helpers import race, task_id, work

CHAIN = {
    "name": "chain",
    "max_running_tasks": 2,
    "tasks": [
        {"key": "a", "type": "work", "retry": {"max_attempts": 1}},
        {
            "key": "b",
            "type": "work",
            "depends_on": ["a"],
            "retry": {"max_attempts": 2, "backoff_seconds": 0},
        },
    ],
}
NOW = timedelta(0)


def finished_runs(app: FlowForge) -> list[UUID]:
    """Three ended runs: one succeeded (with a retry), one failed, one cancelled."""
    done = app.start_workflow_run(CHAIN, {"n": 1})
    app.advance_workflow_run(done)
    work(app, done, "a")
    app.advance_workflow_run(done)
    work(app, done, "b", "fail")
    app.advance_workflow_run(done)
    app.advance_workflow_run(done)  # the retry falls due at once: ready again
    work(app, done, "b")
    app.advance_workflow_run(done)
    failed = app.start_workflow_run(CHAIN)
    app.advance_workflow_run(failed)
    work(app, failed, "a", "fail")
    app.advance_workflow_run(failed)
    cancelled = app.start_workflow_run(CHAIN)
    assert app.cancel_workflow_run(cancelled)
    for run in (done, failed, cancelled):
        assert app.get_workflow_run(run).state in ("succeeded", "failed", "cancelled")
    return [done, failed, cancelled]


def live_run(app: FlowForge) -> UUID:
    run = app.start_workflow_run(CHAIN)
    app.advance_workflow_run(run)
    work(app, run, "a")
    app.advance_workflow_run(run)
    assert app.get_workflow_run(run).state == "running"
    return run


def snapshot(app: FlowForge, run_ids: list[UUID]) -> list[tuple[Any, ...]]:
    """Every row and every stored event (bytes included) of the runs, as they are."""
    with app.store.archive_read() as reads:
        records = reads.export(run_ids)
    return [_flat(record) for record in records]


def _flat(record: RunRecord) -> tuple[Any, ...]:
    events = [(e.originator_id, e.originator_version, e.topic, e.state) for e in record.events]
    return (record.run, record.tasks, record.bookkeeping, events)


def event_count(app: FlowForge) -> int:
    return app.database_stats().events


def test_archive_then_restore_gives_back_every_event_byte_for_byte_and_every_row(
    app: FlowForge, tmp_path: Path
) -> None:
    ended, live = finished_runs(app), live_run(app)
    before, live_before = snapshot(app, ended), snapshot(app, [live])
    assert any(record[2]["run_limits"] for record in before)  # bookkeeping goes too
    assert any(record[2]["outbox"] for record in before)
    file = tmp_path / "old.ffarchive"

    report = app.archive_runs(file, older_than=NOW)

    assert (report.runs, report.archived, report.left_live) == (3, 3, 0)
    assert snapshot(app, ended) == []
    assert snapshot(app, [live]) == live_before
    assert event_count(app) == len(live_before[0][3])
    for run in ended:
        with pytest.raises(errors.ArchivedRunError, match=str(file)):
            app.get_workflow_run(run)

    restored = app.restore_runs(file)

    assert (restored.restored, restored.already_live) == (3, 0)
    assert snapshot(app, ended) == before
    assert snapshot(app, [live]) == live_before
    app.rebuild_projections()
    assert db.verify(app)[1] == []
    assert snapshot(app, ended) == before


def test_a_runs_attempt_logs_go_to_its_archive_file_and_come_back_with_it(
    app: FlowForge, tmp_path: Path
) -> None:
    ended, live = finished_runs(app), live_run(app)
    for run in (ended[0], live):
        a = task_id(app, run, "a")
        app.record_attempt_log(a, 1, attempt=1, worker_id="w1-0a1b", output=f"{run} printed\n")
    before = snapshot(app, ended)
    assert [len(record[2]["attempt_logs"]) for record in before] == [1, 0, 0]
    file = tmp_path / "old.ffarchive"

    app.archive_runs(file, older_than=NOW)

    assert app.attempt_logs(task_id_in(before[0], "a")) == []  # gone with its run
    (kept,) = app.attempt_logs(task_id(app, live, "a"))  # a live run's stays
    assert kept.output == f"{live} printed\n"
    with zipfile.ZipFile(file) as zipped:
        assert f"{ended[0]} printed" in zipped.read(archive_file.RUNS).decode()

    app.restore_runs(file)

    assert snapshot(app, ended) == before
    (back,) = app.attempt_logs(task_id(app, ended[0], "a"))
    assert (back.attempt, back.worker_id, back.output) == (1, "w1-0a1b", f"{ended[0]} printed\n")


def task_id_in(record: tuple[Any, ...], key: str) -> UUID:
    found: UUID = next(task["id"] for task in record[1] if task["task_key"] == key)
    return found


def test_an_archive_file_without_attempt_logs_restores_its_runs_without_any() -> None:
    record = RunRecord(run={"id": uuid4()})
    line = json.loads(archive_file.encode_record(record))
    del line["attempt_logs"]  # as a file written before attempt logs were archived
    decoded = archive_file.decode_record(json.dumps(line).encode())
    assert decoded.bookkeeping["attempt_logs"] == []


def test_an_archive_or_a_restore_made_twice_changes_nothing_the_second_time(
    app: FlowForge, tmp_path: Path
) -> None:
    ended = finished_runs(app)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    written = file.read_bytes()

    again = app.archive_runs(file, older_than=NOW)

    assert (again.archived, again.already_gone, again.left_live) == (0, 3, 0)
    assert file.read_bytes() == written
    app.restore_runs(file)
    after_restore = snapshot(app, ended)
    twice = app.restore_runs(file)
    assert (twice.restored, twice.already_live) == (0, 3)
    assert snapshot(app, ended) == after_restore


def test_live_runs_are_never_archived_and_a_cutoff_in_the_past_spares_recent_runs(
    app: FlowForge, tmp_path: Path
) -> None:
    finished_runs(app)
    live = live_run(app)
    pending = app.start_workflow_run(CHAIN)

    assert app.archive_runs(tmp_path / "a", older_than=timedelta(days=30)).file is None
    report = app.archive_runs(tmp_path / "b", older_than=NOW)

    assert report.runs == 3
    assert app.get_workflow_run(live).state == "running"
    assert app.get_workflow_run(pending).state == "pending"


def test_the_archived_events_are_read_by_the_event_librarys_own_mapper(
    app: FlowForge, tmp_path: Path
) -> None:
    ended = finished_runs(app)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)

    manifest = archive_file.read_manifest(file)
    events = [e for r in archive_file.records(file, manifest) for e in r.events]

    decoded = [app.events.mapper.to_domain_event(event) for event in events]
    assert {event.originator_id for event in decoded} >= set(ended)
    assert manifest["counts"]["events"] == len(events)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flipped(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


def _edited(path: Path) -> None:
    """A whole zip whose runs member was edited (one character of a run's line)."""
    with zipfile.ZipFile(path) as old:
        members = {name: old.read(name) for name in old.namelist()}
    members[archive_file.RUNS] = members[archive_file.RUNS].replace(b'"chain"', b'"chaim"', 1)
    with zipfile.ZipFile(path, "w") as new:
        for name, data in members.items():
            new.writestr(name, data)


def _listed(path: Path) -> None:
    """A whole zip whose manifest lists another run (the deletes read their ids there)."""
    with zipfile.ZipFile(path) as old:
        members = {name: old.read(name) for name in old.namelist()}
    manifest = json.loads(members[archive_file.MANIFEST])
    manifest["runs"][0]["id"] = str(uuid4())
    members[archive_file.MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as new:
        for name, data in members.items():
            new.writestr(name, data)


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncated,
    "flipped": _flipped,
    "edited": _edited,
    "listed": _listed,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_a_damaged_file_is_refused_by_the_archive_and_nothing_is_deleted(
    app: FlowForge, tmp_path: Path, corrupt: str
) -> None:
    ended = finished_runs(app)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    app.restore_runs(file)
    before = snapshot(app, ended)
    CORRUPTIONS[corrupt](file)

    with pytest.raises(errors.CorruptArchiveError, match="nothing was deleted or restored"):
        app.archive_runs(file, older_than=NOW)  # the file exists: its deletes are next

    assert snapshot(app, ended) == before


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_a_damaged_file_is_refused_by_the_restore_and_nothing_is_restored(
    app: FlowForge, tmp_path: Path, corrupt: str
) -> None:
    ended = finished_runs(app)
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    CORRUPTIONS[corrupt](file)

    with pytest.raises(errors.CorruptArchiveError, match=str(file)):
        app.restore_runs(file)

    assert snapshot(app, ended) == []
    assert app.database_stats().rows["archived_runs"] == 3


def test_a_file_that_is_not_an_archive_is_refused(app: FlowForge, tmp_path: Path) -> None:
    missing, text = tmp_path / "missing", tmp_path / "text"
    text.write_text("not a zip")
    with pytest.raises(errors.ArchiveFileError, match="no archive file"):
        app.restore_runs(missing)
    with pytest.raises(errors.CorruptArchiveError, match="not a whole zip file"):
        app.restore_runs(text)


def test_a_second_archiver_is_refused_while_one_holds_the_lock(
    app: FlowForge, tmp_path: Path
) -> None:
    finished_runs(app)
    with app.database.archiver_lock() as taken:
        assert taken
        with pytest.raises(errors.ArchiverBusyError):
            app.archive_runs(tmp_path / "a", older_than=NOW)
        with pytest.raises(errors.ArchiverBusyError):
            app.restore_runs(tmp_path / "a")
    assert app.archive_runs(tmp_path / "a", older_than=NOW).archived == 3


@contextmanager
def _always_taken() -> Iterator[bool]:
    yield True


def test_two_archivers_at_once_archive_each_run_once_even_without_the_lock(
    app: FlowForge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock keeps a second archiver out; the deletes' own check (the run still
    there, at the file's version) is what makes each run archived once. Both archivers
    write their file from the same runs, then race for the deletes."""
    ended = finished_runs(app) + finished_runs(app)
    monkeypatch.setattr(type(app.database), "archiver_lock", lambda self: _always_taken())
    files = [tmp_path / "one", tmp_path / "two"]
    barrier = threading.Barrier(2)

    def archiver(file: Path) -> Callable[[], archive.ArchiveReport]:
        def go() -> archive.ArchiveReport:
            progress = _wait_before_deleting(barrier)
            return app.archive_runs(file, older_than=NOW, progress=progress)

        return go

    reports = race(*(archiver(file) for file in files))

    assert sum(r.archived for r in reports) == len(ended)
    assert reports[0].runs == reports[1].runs == len(ended)  # both files hold every run
    assert sum(r.archived_events for r in reports) == reports[0].events
    assert snapshot(app, ended) == []
    assert app.database_stats().rows["archived_runs"] == len(ended)


def _wait_before_deleting(barrier: threading.Barrier) -> archive.Progress:
    def progress(step: str, done: int, total: int) -> None:
        if step == "verify":
            barrier.wait(timeout=30)  # both files written: the deletes race

    return progress


def test_a_restored_run_can_be_run_again(app: FlowForge, tmp_path: Path) -> None:
    done = finished_runs(app)[0]
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)
    with pytest.raises(errors.ArchivedRunError):
        app.rerun_workflow_run(done, from_tasks=["b"])
    app.restore_runs(file)

    again = app.rerun_workflow_run(done, from_tasks=["b"]).run_id

    app.advance_workflow_run(again)
    work(app, again, "b")
    app.advance_workflow_run(again)
    assert app.get_workflow_run(again).state == "succeeded"


def test_a_short_id_of_an_archived_run_names_its_file(app: FlowForge, tmp_path: Path) -> None:
    from flowforge.app import ids

    done = finished_runs(app)[0]
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)

    with pytest.raises(errors.ArchivedRunError, match=f"restore {file}"):
        ids.resolve_run(app, done.hex[-8:])
    with pytest.raises(errors.UnknownRunError):
        ids.resolve_run(app, "0123abcd")


def test_the_web_ui_of_an_archived_run_says_where_it_went(app: FlowForge, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from flowforge.ui.web import create_app

    done = finished_runs(app)[0]
    file = tmp_path / "old.ffarchive"
    app.archive_runs(file, older_than=NOW)

    with TestClient(create_app(app, token=None)) as client:
        page = client.get(f"/runs/{done}")
        search = client.get("/", params={"q": done.hex[-8:]})

    assert page.status_code == search.status_code == 404
    assert str(file) in page.text
    assert f"flowforge db restore {file}" in search.text


def test_a_run_that_ends_while_the_archive_works_is_left_for_the_next_one(
    app: FlowForge, tmp_path: Path
) -> None:
    ended, live = finished_runs(app), live_run(app)

    def end_the_live_run(step: str, done: int, total: int) -> None:
        if step == "write" and app.get_workflow_run(live).state == "running":
            work(app, live, "b")
            app.advance_workflow_run(live)

    report = app.archive_runs(tmp_path / "a", older_than=NOW, progress=end_the_live_run)

    assert report.archived == len(ended)
    assert app.get_workflow_run(live).state == "succeeded"  # ended, and still live
    assert app.archive_runs(tmp_path / "b", older_than=NOW).archived == 1
