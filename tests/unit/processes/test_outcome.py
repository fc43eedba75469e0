"""The outcome writer through a database outage: one write's time, and a batch's
(``OutcomeWriter.write_all``), is bounded by one patience, a write attempt that does
not answer included. The database here is a stand-in that is always down, or that never
answers: what is tested is the writer's own accounting of time and of the outcomes it
keeps, not how a real outage looks (tests/integration/test_worker_faults.py and
tests/integration/test_outcome_patience.py have that)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

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
    # One patience from the batch's first attempt: the last wait ends at the deadline.
    assert clock.now == pytest.approx(PATIENCE_S)
    assert all(writer.kept(o.task_run_id) == o for o in outcomes)


#: A short patience, as ``outcome_patience=0.2``; the stand-in's attempt hangs past it.
SHORT_S = 0.2
#: How long the test waits in real time for what happens at once.
DEADLINE_S = 30.0


class HungDatabase:
    """An application whose finish never answers until released (a database that stopped
    answering: the pool's wait for a connection, a round trip to a silent server)."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.release = threading.Event()

    def finish_task_runs(self, finishes: Sequence[Finish], **_: Any) -> list[bool]:
        self.calls.append(len(finishes))
        assert self.release.wait(DEADLINE_S), "the test never released the attempt"
        return [True] * len(finishes)


def test_the_patience_bounds_an_attempt_that_does_not_answer() -> None:
    """outcome_patience=0.2: the worker stops waiting for the one attempt at 0.2 s on its
    clock (servicing the broker meanwhile), keeps the outcome and raises for a requeue;
    it does not wait for the attempt to give up on its own."""
    app, clock = HungDatabase(), Clock()
    writer = OutcomeWriter(app, "w", Stop(), patience=SHORT_S, clock=clock)  # type: ignore[arg-type]
    kept = outcome()
    try:
        with pytest.raises(errors.OutcomeWriteTimedOutError, match="outcome patience"):
            writer.write(kept, clock.wait)
        assert app.calls == [1]  # one attempt, never answered
        assert SHORT_S <= clock.now < SHORT_S + 0.1  # the waits serviced the broker
        assert writer.kept(kept.task_run_id) == kept
    finally:
        app.release.set()


def test_the_patience_bounds_a_batch_whose_first_attempt_does_not_answer() -> None:
    """A batch's patience counts from its first (batched) attempt: once that attempt
    took it, no outcome is tried alone; every one is kept for its redelivery."""
    app, clock = HungDatabase(), Clock()
    writer = OutcomeWriter(app, "w", Stop(), patience=SHORT_S, clock=clock)  # type: ignore[arg-type]
    outcomes = [outcome() for _ in range(BATCH)]
    try:
        written = writer.write_all(outcomes, clock.wait)
        assert all(isinstance(w, errors.OutcomeWriteTimedOutError) for w in written)
        assert len(written) == BATCH
        assert app.calls == [BATCH]
        assert SHORT_S <= clock.now < SHORT_S + 0.1
        assert all(writer.kept(o.task_run_id) == o for o in outcomes)
    finally:
        app.release.set()


def test_a_stop_does_not_abandon_an_attempt_in_flight_only_the_patience_does() -> None:
    """A stopping worker finishes its in-flight message (docs/worker.md): its write
    attempt is still waited for, up to the patience; a stop ends only the retries."""
    app, clock, stop = HungDatabase(), Clock(), Stop()
    writer = OutcomeWriter(app, "w", stop, patience=SHORT_S, clock=clock)  # type: ignore[arg-type]
    stop.set("test")
    try:
        with pytest.raises(errors.OutcomeWriteTimedOutError, match="outcome patience"):
            writer.write(outcome(), clock.wait)
        assert SHORT_S <= clock.now < SHORT_S + 0.1
        assert app.calls == [1]
    finally:
        app.release.set()


def test_an_attempt_that_answers_is_returned_without_waiting_on_the_clock() -> None:
    app, clock = HungDatabase(), Clock()
    app.release.set()
    writer = OutcomeWriter(app, "w", Stop(), patience=SHORT_S, clock=clock)  # type: ignore[arg-type]
    assert writer.write(outcome(), clock.wait) is True
    assert writer.write_all([outcome(), outcome()], clock.wait) == [True, True]
    assert app.calls == [1, 2]
