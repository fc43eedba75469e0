"""`flowforge db rebuild`'s verifier (``cli/db.py``: ``verify``, ``logged_row``,
``differences``) compares every column of every row with the log: a row wrong in any one
column, whichever, is named with that column. The rows and their log are real (both
backends); the table's corruption is one field of one row as the service reads it, so
that every column, whatever its type, can be made wrong the same way."""

from __future__ import annotations

import dataclasses
from typing import Any, cast
from uuid import UUID

import pytest

from flowforge.app.results import ScheduleView, TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.cli import db
from tests.helpers import one_task

#: Columns a view has that its aggregate does not log (none: every column is checked).
NOT_LOGGED: frozenset[str] = frozenset()


class _Wrong:
    """A value no logged value equals."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<wrong>"


WRONG = _Wrong()


class OneFieldWrong:
    """The service, except that one field of one row reads wrong, as a table edited
    behind FlowForge's back would read."""

    def __init__(self, app: FlowForge, row_id: UUID, column: str) -> None:
        self._app, self._row_id, self._column = app, row_id, column

    def __getattr__(self, name: str) -> Any:
        return getattr(self._app, name)

    def _read(self, row: Any) -> Any:
        if row.id != self._row_id:
            return row
        return dataclasses.replace(row, **{self._column: WRONG})

    def every_run(self) -> list[WorkflowRunView]:
        return [self._read(r) for r in self._app.every_run()]

    def task_runs(self, run_id: UUID) -> list[TaskRunView]:
        return [self._read(t) for t in self._app.task_runs(run_id)]

    def every_task_run(self) -> list[TaskRunView]:
        return [self._read(t) for t in self._app.every_task_run()]

    def list_schedules(self) -> list[ScheduleView]:
        return [self._read(s) for s in self._app.list_schedules()]


#: The column the verifier finds a row's log by (a wrong one finds no log to compare).
KEYS = {WorkflowRunView: "id", TaskRunView: "id", ScheduleView: "name"}


def columns(view: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(view) if f.name not in NOT_LOGGED]


@pytest.mark.parametrize(
    ("view", "label"),
    [(WorkflowRunView, "workflow run"), (TaskRunView, "task run"), (ScheduleView, "schedule")],
)
def test_a_row_wrong_in_any_one_column_is_named_by_the_verifier(
    app: FlowForge, view: type[Any], label: str
) -> None:
    run_id = app.start_workflow_run(one_task("t"))
    (task,) = app.task_runs(run_id)
    claim = app.claim_task_run(task.id, "w", 30.0)
    assert claim is not None
    assert app.finish_task_run(task.id, claim.fencing_token, "succeed", {"n": 1})
    app.add_schedule("nightly", "0 3 * * *", one_task("s"))
    rows: dict[type[Any], Any] = {
        WorkflowRunView: app.get_workflow_run(run_id),
        TaskRunView: app.get_task_run(task.id),
        ScheduleView: app.list_schedules()[0],
    }
    row, aggregate = rows[view], aggregate_of(app, rows[view])
    assert db.verify(app) == (2, [])

    # Every column of the row is compared: the log gives each one a value.
    assert set(db.logged_row(aggregate)) == set(columns(view))
    for column in sorted(set(columns(view)) - {KEYS[view]}):
        checked, problems = db.verify(cast(FlowForge, OneFieldWrong(app, row.id, column)))
        assert checked == 2
        assert len(problems) == 1, (column, problems)
        assert problems[0].startswith(f"{label} "), problems
        assert f": {column} is <wrong> in the table but " in problems[0], (column, problems)


def aggregate_of(app: FlowForge, row: Any) -> Any:
    if isinstance(row, WorkflowRunView):
        return app.workflow_run_aggregate(row.id)
    if isinstance(row, TaskRunView):
        return app.task_run_aggregate(row.id)
    return app.schedule_aggregate(row.name)
