"""Cron schedules: add, list, pause, resume, delete, and fire the ones that are due.

A schedule starts a run of its workflow at each fire time of its cron expression in its
time zone (``flowforge/aggregates/cron.py`` does the arithmetic). Every change is one
conditional write on the schedule's row with its event (``projections/writes/
schedules.py``). A fire is one transaction that creates the run, with an idempotency
key of the schedule's name and the fire time, and moves the row past that fire time on
the condition that it had not moved: of several schedulers firing one schedule at once,
exactly one commits; the others roll back, run included (docs/scheduling/cron.md).

Only a deployment's scheduler fires schedules (no scope: every run is its business); an
embedded runner (``flowforge run``, scoped to its own run or its handlers' task types)
leaves them to it, as it leaves other runs alone (``app/scope.py``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flowforge import errors, observe
from flowforge.aggregates import cron as cron_rules
from flowforge.aggregates import cron_schedule, json_values
from flowforge.aggregates.cron_schedule import Schedule
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.machines import SCHEDULE_MACHINE
from flowforge.aggregates.task_run import ACTOR_USER
from flowforge.app.arguments import text
from flowforge.app.core import ServiceCore
from flowforge.app.definition_files import load_definition
from flowforge.app.results import FiredRun
from flowforge.app.scope import EVERY_RUN, Scope
from flowforge.projections.tables import ScheduleRow
from flowforge.projections.writes.cron_schedules import FireLost

log = logging.getLogger(__name__)

#: Due schedules read per pass; the rest fire at the next pass (a second later).
DUE_BATCH = 100
#: What a schedule's name may be: it names the schedule on the command line and in its
#: runs' idempotency keys (``schedule:<name>@<fire time>``).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


def fires_schedules(scope: Scope | None) -> bool:
    """Whether a scheduler of this scope fires schedules: only one that limits nothing
    (a deployment's ``flowforge scheduler``)."""
    return scope is None or scope == EVERY_RUN


class Schedules:
    """The cron schedules' commands and queries (the module says how they work)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def add_schedule(
        self,
        name: str,
        cron: str,
        definition: WorkflowDefinition | Mapping[str, Any] | str,
        inputs: Mapping[str, Any] | None = None,
        *,
        timezone: str = "UTC",
        catch_up: int = 0,
        actor: str = ACTOR_USER,
    ) -> ScheduleRow:
        """Start ``definition`` with ``inputs`` at every fire time of ``cron`` (five
        fields, or six with leading seconds) in ``timezone`` (an IANA name), from the
        first fire time after now (the database's clock). ``catch_up``: how many
        missed fire times a scheduler that was down catches up besides the latest
        (default 0: after downtime, one run, for the latest).

        ``InvalidScheduleError`` naming a bad name, expression, time zone or catch-up,
        ``InvalidWorkflowDefinitionError`` for a bad workflow (all before any I/O);
        ``ScheduleExistsError`` when a schedule that is not deleted has the name."""
        name = schedule_name(name)
        checked_cron = cron_rules.Cron(text(cron, "cron"), text(timezone, "timezone"))
        catch_up = cron_rules.check_catch_up(catch_up)
        checked = load_definition(definition)
        run_inputs = json_values.checked_json(dict(inputs or {}), "inputs")
        with self._core.writes() as writes:
            row = writes.schedules.create(
                name,
                checked_cron,
                checked,
                run_inputs,
                catch_up=catch_up,
                actor=text(actor, "actor"),
            )
        if row is None:
            raise errors.ScheduleExistsError(
                f"a schedule named {name!r} exists: pick another name, or delete it first "
                f"(`flowforge schedule delete {name}`)"
            )
        log.info("schedule added", extra={"schedule": name, "next_fire_at": str(row.next_fire_at)})
        return row

    def get_schedule(self, name: str) -> ScheduleRow:
        """The schedule of that name (not deleted); ``UnknownScheduleError`` if none."""
        with self._core.reads() as reads:
            row = reads.schedule(name)
        if row is None:
            raise _unknown(name)
        return row

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule that is not deleted, by name."""
        with self._core.reads() as reads:
            return reads.every_schedule()

    def schedule_aggregate(self, name: str) -> Schedule:
        """The schedule rebuilt from its events (the audit log)."""
        aggregate: Schedule = self._core.events.repository.get(self.get_schedule(name).id)
        return aggregate

    def pause_schedule(self, name: str, *, actor: str = ACTOR_USER) -> bool:
        """Stop firing until resumed; False if it was already paused (or a concurrent
        change won). ``UnknownScheduleError`` for no such cron_schedule."""
        edge = SCHEDULE_MACHINE.get("pause")
        with self._core.writes() as writes:
            row = writes.schedules.move(name, edge, next_fire_at=None, actor=text(actor, "actor"))
            if row is None and writes.schedule(name) is None:
                raise _unknown(name)
        return row is not None

    def resume_schedule(self, name: str, *, actor: str = ACTOR_USER) -> bool:
        """Fire again, from the first fire time after now (the database's clock): the
        fire times that passed while it was paused are not made up. False if it was
        not paused. ``UnknownScheduleError`` for no such cron_schedule (one deleted
        meanwhile included)."""
        edge = SCHEDULE_MACHINE.get("resume")
        with self._core.writes() as writes:
            current = writes.schedule(name)
            if current is None:
                raise _unknown(name)
            after = cron_rules.Cron(current.cron, current.timezone).next_fire_after(writes.now())
            row = writes.schedules.move(name, edge, next_fire_at=after, actor=text(actor, "actor"))
            if row is None and writes.schedule(name) is None:
                raise _unknown(name)  # deleted since it was read: as a pause would say
        return row is not None

    def delete_schedule(self, name: str, *, actor: str = ACTOR_USER) -> bool:
        """Delete it, active or paused: it never fires again, and its name is free for a
        new cron_schedule. ``UnknownScheduleError`` for no such (live) cron_schedule."""
        with self._core.writes() as writes:
            row = writes.schedules.delete(name, actor=text(actor, "actor"))
            if row is None and writes.schedule(name) is None:
                raise _unknown(name)
        return row is not None

    def fire_due_schedules(
        self, *, as_of: datetime | None = None, limit: int = DUE_BATCH
    ) -> list[FiredRun]:
        """Fire every schedule due by the database's clock (``as_of``: as if it were
        that time, for tests and demonstrations), each fire in its own transaction with
        its run; the fires this call made (another scheduler's are not in it)."""
        with self._core.reads() as reads:
            now = as_of or reads.now()
            due = reads.due_schedules(limit, as_of)
        fired: list[FiredRun] = []
        for row in due:
            try:
                fired += self._fire(row, now, as_of)
            except errors.DomainError as exc:  # a stored schedule no longer valid
                log.error("schedule not fired", extra={"schedule": row.name, "error": str(exc)})
        return fired

    def _fire(self, row: ScheduleRow, now: datetime, as_of: datetime | None) -> list[FiredRun]:
        assert row.next_fire_at is not None  # an active row has one (schema CHECK)
        fires = cron_rules.plan(
            cron_rules.Cron(row.cron, row.timezone), row.next_fire_at, now, row.catch_up
        )
        if fires and fires[0].fire_at > row.next_fire_at:
            log.warning(
                "schedule skipped missed fire times",
                extra={
                    "schedule": row.name,
                    "from": str(row.next_fire_at),
                    "until": str(fires[0].fire_at),
                    "catch_up": row.catch_up,
                },
            )
        fired = []
        for fire in fires:
            actor = cron_schedule.run_actor(row.name)
            try:
                with (
                    observe.announce.run_creation(row.workflow_name, actor, (FireLost,)) as trace,
                    self._core.writes() as writes,
                ):
                    row = writes.schedules.fire(
                        row, fire, as_of=as_of, trace_context=trace.context
                    )
                    assert row.last_run_id is not None
                    trace.created(row.last_run_id, True)
            except FireLost:
                # Another scheduler fired it (or it was paused or deleted): its run is
                # theirs, and this transaction, run included, rolled back.
                log.debug("schedule fired elsewhere", extra={"schedule": row.name})
                break
            assert row.last_run_id is not None
            fired.append(FiredRun(row.name, fire.fire_at, row.last_run_id))
            log.info(
                "schedule fired",
                extra={
                    "schedule": row.name,
                    "fire_at": str(fire.fire_at),
                    "workflow_run_id": str(row.last_run_id),
                },
            )
        return fired


def schedule_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise errors.InvalidScheduleError(
            f"schedule name {name!r}: use 1 to 100 letters, digits, '_', '.', '-' or ':', "
            f"starting with a letter or digit"
        )
    return name


def _unknown(name: str) -> errors.UnknownScheduleError:
    return errors.UnknownScheduleError(
        f"no schedule named {name!r}; list them with `flowforge schedule list`"
    )
