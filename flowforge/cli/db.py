"""``flowforge db init``, ``db migrate`` and ``db rebuild``.

Migrations are explicit: ``db init`` and ``db migrate`` (the same operation under two
names: create the schema, or apply what is missing) are, with ``run`` and ``demo``, the
only commands that change the schema; every other command checks the version and
refuses with the command to run.

The rebuild is checked, not trusted: after the tables are rebuilt from the log, every
row is compared with its aggregate reconstituted from the log, field by field, its
``created_at`` and ``updated_at`` included (the times of its first and last events),
the aggregate folded by the event library's own mutator, not by the rebuild's fold
(``projections/folding.py``), so a difference means a bug in either or a database
edited by hand, and is reported rather than hidden.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flowforge import timefmt
from flowforge.aggregates.base import MachineAggregate
from flowforge.app.service import FlowForge
from flowforge.cli import common
from flowforge.cli.exits import EXIT_FAILED


def init(args: argparse.Namespace) -> int:
    """Create the schema, or apply the missing migrations (idempotent, under a lock)."""
    settings = common.settings_from(args)
    with common.open_app(settings, migrate=True) as app:
        database = app.database
        print(
            f"database {database.dialect} {database.location}: schema version "
            f"{app.schema_version}, deployment {app.deployment_id}"
            + (
                " (dispatch queues "
                f"{settings.broker.for_deployment(app.deployment_id).queue_for('<type>')})"
                if settings.broker is not None
                else ""
            )
        )
    return 0


#: ``db migrate`` is ``db init``: both bring the schema to this FlowForge's version.
migrate = init


def rebuild(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        report = app.rebuild_projections()
        print(
            f"rebuilt {report.workflow_runs} workflow runs and {report.task_runs} task runs "
            f"from {report.events} events"
        )
        checked, problems = verify(app)
    expected = report.workflow_runs + report.task_runs
    if checked != expected:
        problems.append(f"the tables hold {checked} rows, but the log created {expected}")
    if problems:
        print(f"verified {checked} rows against the log: {len(problems)} differences")
        for problem in problems:
            print(f"  {problem}")
        return EXIT_FAILED
    print(f"verified {checked} rows against the log: all match")
    return 0


def verify(app: FlowForge) -> tuple[int, list[str]]:
    """Compare every row with its aggregate reconstituted from the log: how many run
    and task rows were checked, and each difference (schedules' too)."""
    checked, problems = 0, []
    # The whole log read once, folded in memory: a read of the log per row was most of
    # the rebuild's time (docs/performance.md, "Archive, restore and rebuild").
    logged = app.logged_aggregates()
    for run in app.every_run():
        problems += _compared(f"workflow run {run.id}", logged.get(run.id), run)
        checked += 1
    # Every task row in one read (a read per run was a third of the verification).
    for task in app.every_task_run():
        label = f"task run {task.id} ({task.task_key})"
        problems += _compared(label, logged.get(task.id), task)
        checked += 1
    # The cron schedules (not counted: the report counts runs and tasks), the live ones.
    for schedule in app.list_schedules():
        expected = logged_row(app.schedule_aggregate(schedule.name))
        problems += differences(f"schedule {schedule.name}", expected, fields_of(schedule))
    return checked, problems


def _compared(label: str, aggregate: MachineAggregate | None, row: Any) -> list[str]:
    if aggregate is None:
        return [f"{label}: the table has it but the log has no event of it"]
    return differences(label, logged_row(aggregate), fields_of(row))


def fields_of(row: Any) -> dict[str, Any]:
    """A row view's fields by name, as they are (``dataclasses.asdict`` deep-copied
    every JSON value of every row: half the verification's time)."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}


def logged_row(aggregate: MachineAggregate) -> dict[str, Any]:
    """The row ``aggregate``, reconstituted from the log, projects to: its fields
    (``snapshot``), and its first and last events' times as ``created_at`` and
    ``updated_at``.

    ``snapshot`` leaves the times out: they are not the aggregate's declared fields but
    the library's (``created_on``, ``modified_on``), and an aggregate still in memory can
    carry a stand-in (``projector.TRANSACTION_NOW``, until PostgreSQL writes now() in
    its place). Read back from the log they are the stored times, and they compare
    exactly, with no tolerance: the log keeps each as ISO text to the microsecond with
    its offset, the rebuild writes it to the row as it is, and both backends keep
    microseconds (PostgreSQL's timestamptz; SQLite's integer microseconds, whose clock
    ticks in whole milliseconds, so nothing is rounded on the way). Times in another
    session time zone are the same instants and compare equal.
    """
    row = aggregate.snapshot()
    row["created_at"] = aggregate.created_on
    row["updated_at"] = aggregate.modified_on
    return row


def differences(label: str, from_log: Mapping[str, Any], row: Mapping[str, Any]) -> list[str]:
    """Each field where the row disagrees with the aggregate (pure)."""
    return [
        f"{label}: {name} is {_shown(row.get(name))} in the table but {_shown(value)} in the log"
        for name, value in from_log.items()
        if row.get(name) != value
    ]


def _shown(value: Any) -> str:
    # A time in UTC to the microsecond (a row read in another session time zone is the
    # same instant); anything else as Python writes it.
    return timefmt.iso(value) if isinstance(value, datetime) else repr(value)
