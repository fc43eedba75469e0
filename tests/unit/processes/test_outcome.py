"""The outcome writer's batch (``OutcomeWriter.write_all``) through a database outage:
its time is bounded by one patience for the whole batch. The database here is a stand-in
that is always down: what is tested is the writer's own accounting of time and of the
outcomes it keeps, not how a real outage looks (tests/integration/test_worker_faults.py
has that)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from flowforge import errors
from flowforge.app.commands import Finish
from flowforge.processes.loop import Stop
from flowforge.processes.outcome import Outcome, OutcomeWriter

PATIENCE_S = 10.0
BATCH = 3


class DownDatabase:
    """An application whose every finish fails as when the database is unavailable."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def finish_task_runs(self, finishes: Sequence[Finish], **_: Any) -> list[bool]:
        self.calls.append(len(finishes))
        raise errors.DatabaseUnavailableError("PostgreSQL at 127.0.0.1:5432 is unavailable")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


def outcome() -> Outcome:
    return Outcome(uuid.uuid4(), "t", 1, 1, "succeed", {"ok": True}, None)


def test_an_outage_costs_a_batch_one_patience_and_keeps_every_outcome() -> None:
    app, clock = DownDatabase(), Clock()
    writer = OutcomeWriter(app, "w", Stop(), patience=PATIENCE_S, clock=clock)  # type: ignore[arg-type]
    outcomes = [outcome() for _ in range(BATCH)]
    written = writer.write_all(outcomes, clock.wait)
    assert all(isinstance(w, errors.DatabaseUnavailableError) for w in written)
    assert len(written) == BATCH
    # The batch once, then the first outcome alone until its patience ran out; the
    # others are not tried again: each would have waited a patience of its own.
    assert app.calls[0] == BATCH and set(app.calls[1:]) == {1}
    assert PATIENCE_S <= clock.now < 2 * PATIENCE_S
    assert all(writer.kept(o.task_run_id) == o for o in outcomes)
