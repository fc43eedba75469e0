"""A cron schedule's writes: its creation, its edges, and its fires.

Each is ONE conditional write on the schedule's row with its event, built in Python from
the row the write returned and stored in the same transaction (``recording.py``). A fire
also creates its run in that transaction, with an idempotency key of the schedule's name
and the fire time: the run exists iff the schedule's row moved past that fire time
(docs/scheduling/cron.md, "Exactly one run per fire").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from flowforge.aggregates import cron_schedule, run_plan
from flowforge.aggregates.cron import Cron, Fire
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.aggregates.ids import new_id
from flowforge.aggregates.machines import SCHEDULE_MACHINE, Transition
from flowforge.aggregates.states import ScheduleState
from flowforge.projections import projector
from flowforge.projections.reads import first_row
from flowforge.projections.tables import ScheduleRow
from flowforge.projections.writes.recording import Recording
from flowforge.projections.writes.runs import RunWrites

#: A schedule's deletion: one edge from each live state, tried in this order.
DELETE_EDGES: tuple[Transition, ...] = tuple(
    edge for edge in SCHEDULE_MACHINE if edge.target is ScheduleState.DELETED
)


class FireLost(Exception):  # noqa: N818 (a signal to roll back, not an error)
    """Another scheduler fired the schedule first: the transaction rolls back, taking
    the run it created with it. Caught by the caller of :meth:`ScheduleWrites.fire`."""


class ScheduleWrites:
    """The schedule writes of one write transaction."""

    def __init__(
        self, recording: Recording, runs: RunWrites, *, now: Callable[[], datetime]
    ) -> None:
        self._recording = recording
        self._tx = recording.tx
        self._runs = runs
        #: The database's clock (``Reads.now``).
        self._now = now

    def create(
        self,
        name: str,
        cron: Cron,
        definition: WorkflowDefinition,
        inputs: dict[str, Any],
        *,
        catch_up: int,
        actor: str,
    ) -> ScheduleRow | None:
        """An active schedule whose first fire time is the first after the database's
        clock; None, and nothing written, when a live schedule has the name."""
        at = self._now()
        created = cron_schedule.created_event(
            new_id(),
            at=at,
            name=name,
            cron=cron.expression,
            timezone=cron.timezone,
            workflow_name=definition.name,
            definition=definition.to_dict(),
            inputs=inputs,
            catch_up=catch_up,
            next_fire_at=cron.next_fire_after(at),
            actor=actor,
        )
        if not projector.apply_event(self._tx, created):
            return None
        self._recording.append([created])
        return first_row(ScheduleRow, self._tx.run("select_schedule_by_name", {"name": name}))

    def move(
        self, name: str, edge: Transition, *, next_fire_at: datetime | None, actor: str
    ) -> ScheduleRow | None:
        """Take ``edge`` (pause, resume, delete, delete_paused) on the live schedule
        ``name``; the new row, or None if it was not in the edge's source state."""
        params = {
            "name": name,
            "source": edge.source.value,
            "target": edge.target.value,
            "next_fire_at": next_fire_at,
        }
        row = first_row(ScheduleRow, self._tx.run("schedule_move", params))
        if row is not None:
            self._record(cron_schedule.EVENT_FOR_TRANSITION[edge.name], row, edge.source, actor)
        return row

    def delete(self, name: str, *, actor: str) -> ScheduleRow | None:
        """Delete the live schedule ``name``, active or paused: its row locked first
        (``lock_live_schedule``: on PostgreSQL it waits for a pause or resume in flight
        and reads the state it committed), then the ONE conditional write of the edge
        from that state, which the lock keeps matching. (Trying each edge's write in
        turn lost to a resume committing between the two: neither matched.)"""
        live = self._tx.run("lock_live_schedule", {"name": name})
        if not live:
            return None
        state = ScheduleState(live[0]["state"])
        (edge,) = (edge for edge in DELETE_EDGES if edge.source is state)
        return self.move(name, edge, next_fire_at=None, actor=actor)

    def fire(
        self,
        row: ScheduleRow,
        fire: Fire,
        *,
        as_of: datetime | None,
        trace_context: dict[str, str] | None = None,
    ) -> ScheduleRow:
        """Create the run of ``fire`` and move the schedule past it (``schedule_fire``),
        in this transaction; ``FireLost`` (roll it back) when the schedule no longer
        next fires at ``row.next_fire_at``: another scheduler fired it, or it was
        paused or deleted. ``trace_context``: the run's (``run_plan.RunPlan``)."""
        definition = WorkflowDefinition.model_validate(row.definition)
        plan = run_plan.submitted_run(
            definition,
            row.inputs,
            idempotency_key=cron_schedule.idempotency_key(row.name, fire.fire_at),
            actor=cron_schedule.run_actor(row.name),
            trace_context=trace_context,
        )
        run_id, _ = self._runs.create(plan)
        params = {
            "id": row.id,
            "due_at": row.next_fire_at,
            "as_of": as_of,
            "next_fire_at": fire.next_fire_at,
            "last_fire_at": fire.fire_at,
            "last_run_id": run_id,
        }
        fired = first_row(ScheduleRow, self._tx.run("schedule_fire", params))
        if fired is None:
            raise FireLost(row.name)
        self._record(
            cron_schedule.Schedule.Fired,
            fired,
            ScheduleState.ACTIVE,
            cron_schedule.ACTOR_SCHEDULER,
        )
        return fired

    def _record(
        self,
        event_class: type[cron_schedule.Schedule.Transitioned],
        row: ScheduleRow,
        source: StrEnum,
        actor: str,
    ) -> None:
        event = cron_schedule.event_from_row(
            event_class, row.values(), source=str(source.value), actor=actor
        )
        self._recording.append([event])
