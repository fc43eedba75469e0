"""``flowforge schedule add|list|pause|resume|delete``: cron schedules
(docs/scheduling/cron.md). A deployment's ``flowforge scheduler`` fires them."""

from __future__ import annotations

import argparse
from datetime import datetime
from zoneinfo import ZoneInfo

from flowforge import timefmt
from flowforge.aggregates.cron import Cron
from flowforge.aggregates.ids import short_id
from flowforge.app.cron_schedules import schedule_name
from flowforge.app.results import ScheduleView
from flowforge.cli import common, render


def add(args: argparse.Namespace) -> int:
    # Everything the user typed is checked before the database is touched.
    name = schedule_name(args.name)
    cron = Cron(args.cron, args.timezone)
    definition = common.load_workflow(args.workflow)
    inputs = common.parse_inputs(args.input)
    with common.open_app(common.settings_from(args)) as app:
        row = app.add_schedule(
            name,
            cron.expression,
            definition,
            inputs,
            timezone=cron.timezone,
            catch_up=args.catch_up,
        )
    if args.json:
        print(render.to_json(schedule_fact(row)))
    else:
        next_fire = _local(row, row.next_fire_at)
        print(f"schedule {row.name}: {row.workflow_name} at {_when(row)}, next {next_fire}")
    return 0


def list_schedules(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    rows: list[ScheduleView] = []
    if not common.default_database_missing(settings):
        with common.open_app(settings) as app:
            rows = app.list_schedules()
    if args.json:
        print(render.to_json([schedule_fact(row) for row in rows]))
        return 0
    if not rows:
        print("no schedules: add one with `flowforge schedule add NAME --cron EXPR FILE`")
        return 0
    # Within 80 columns (issue #49: 140): the workflow and the last fire on a line of
    # their own under the schedule's, the run it started by its short id.
    table = [[row.name, row.state, _when(row), _local(row, row.next_fire_at)] for row in rows]
    header, *lines = render.table(("NAME", "STATE", "CRON", "NEXT FIRE"), table)
    print(header)
    for line, row in zip(lines, rows, strict=True):
        print(line)
        last = "never fired"
        if row.last_fire_at is not None:
            run = "" if row.last_run_id is None else f", run {short_id(row.last_run_id)}"
            last = f"last fire {_local(row, row.last_fire_at)}{run}"
        print(f"  {row.workflow_name}; {last}")
    return 0


def pause(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        changed = app.pause_schedule(args.name)
    print(f"schedule {args.name}: {'paused' if changed else 'already paused'}")
    return 0


def resume(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        changed = app.resume_schedule(args.name)
        row = app.get_schedule(args.name)
    said = "resumed" if changed else f"not paused ({row.state})"
    print(f"schedule {args.name}: {said}, next {_local(row, row.next_fire_at)}")
    return 0


def delete(args: argparse.Namespace) -> int:
    with common.open_app(common.settings_from(args)) as app:
        deleted = app.delete_schedule(args.name)
    # Not deleted: a pause or resume committed between the two edges' writes (the
    # deletion is one conditional write per edge); the schedule is still there.
    print(
        f"schedule {args.name}: "
        + ("deleted" if deleted else "changed meanwhile and was not deleted; run it again")
    )
    return 0 if deleted else 1


def schedule_fact(row: ScheduleView) -> dict[str, object]:
    """A schedule as ``--json`` shows it: times in UTC, and the next in its time zone."""
    return {
        "name": row.name,
        "state": row.state,
        "cron": row.cron,
        "timezone": row.timezone,
        "workflow": row.workflow_name,
        "inputs": row.inputs,
        "catch_up": row.catch_up,
        "next_fire_at": timefmt.iso(row.next_fire_at, missing=""),
        "next_fire_local": _local(row, row.next_fire_at, missing=""),
        "last_fire_at": timefmt.iso(row.last_fire_at, missing=""),
        "last_run_id": row.last_run_id,
    }


def _when(row: ScheduleView) -> str:
    return f"{row.cron} ({row.timezone})"


def _local(row: ScheduleView, at: datetime | None, missing: str = "-") -> str:
    """A fire time in the schedule's own time zone, as its cron expression means it."""
    if at is None:
        return missing
    return at.astimezone(ZoneInfo(row.timezone)).strftime("%Y-%m-%d %H:%M:%S %Z")
