"""A handler's completed outcome, written durably even across a database outage.

Running the handler is the expensive, possibly non-idempotent part; writing its outcome
is one conditional UPDATE. So a write that fails because the database is unavailable
must not cost a second execution. The :class:`OutcomeWriter` keeps the outcome and
retries the write (bounded by ``patience``, with capped jittered backoff, and at once
abandoned on a stop), while the worker keeps the dispatch unsettled. If it gives up, it
keeps the outcome in memory and the worker requeues the dispatch: when the redelivery
reaches this worker, the kept outcome is written without running the handler again.

The patience bounds the attempts too, not only the retries between them: an attempt
can wait far longer than a short patience (the pool's wait for a connection, 5 s; a
round trip to a server that stopped answering, until TCP gives up). Each attempt runs
on the writer's lane, and the worker waits for it only until the patience runs out,
servicing its broker connection meanwhile; an attempt it stopped waiting for may still
land, which its fencing token makes harmless (the redelivery's write is then stale).

What is not claimed: a redelivery that reaches ANOTHER worker (or a worker that stopped
or restarted meanwhile) finds the task still running and acks it without running it;
the task then waits for its lease to expire, the reaper makes it ready, and the handler
runs again (at-least-once, as for a crashed worker). docs/worker.md has the table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from flowforge import errors
from flowforge.app.commands import Finish
from flowforge.app.service import FlowForge
from flowforge.backoff import Backoff
from flowforge.lru import Lru
from flowforge.processes import capture
from flowforge.processes.lane import Lane
from flowforge.processes.loop import Stop

log = logging.getLogger(__name__)

#: How long a completed outcome's write is retried while the database is unavailable,
#: before the worker requeues the dispatch (keeping the outcome for its redelivery).
OUTCOME_WRITE_PATIENCE_S = 120.0
#: The waits between write attempts: exponential from the base, capped, full jitter.
#: Short, because a database that is back should see the outcome at once.
OUTCOME_RETRY_BASE_S = 0.1
OUTCOME_RETRY_CAP_S = 5.0
#: How many unwritten outcomes a worker keeps for their redeliveries (oldest dropped).
KEPT_OUTCOMES = 64
#: While an attempt is in flight, how often the worker looks at its patience (and
#: services its broker connection between two looks).
ATTEMPT_SLICE_S = 0.05

_Wait = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished handler produced, for one claim (its fencing token)."""

    task_run_id: UUID
    task_key: str
    attempt: int
    fencing_token: int
    #: The finish edge: ``succeed`` or ``fail``.
    edge: str
    result: Any
    error: dict[str, str] | None
    #: The task's run: for the log lines (``None`` where a caller has none to give).
    workflow_run_id: UUID | None = None
    #: What the handler printed and logged (``processes/capture.py``); None if nothing.
    output: capture.Captured | None = None


class OutcomeWriter:
    """Writes outcomes with retries; keeps the ones it could not write yet."""

    def __init__(
        self,
        app: FlowForge,
        worker_id: str,
        stop: Stop,
        *,
        patience: float = OUTCOME_WRITE_PATIENCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._app = app
        self._worker_id = worker_id
        self._stop = stop
        self._patience = patience
        self._clock = clock
        self._kept: Lru[UUID, Outcome] = Lru(KEPT_OUTCOMES)
        #: Where the attempts run, one after another (``_attempt``).
        self._lane = Lane(f"outcomes-{worker_id}")

    def kept(self, task_run_id: UUID) -> Outcome | None:
        """The outcome of ``task_run_id`` this worker could not write yet, if any."""
        return self._kept.peek(task_run_id)

    def write(self, outcome: Outcome, wait: _Wait) -> bool:
        """Write ``outcome``; True if it was recorded, False if its claim is stale.

        While the database is unavailable, retries after ``wait(delay)`` (the caller
        services its broker connection meanwhile, and returns early on a stop). Once
        ``patience`` has passed, or a stop was requested, keeps the outcome for the
        redelivery and re-raises the ``PersistenceError``: the caller must requeue.
        An attempt still in flight when the patience runs out is no longer waited for
        (``OutcomeWriteTimedOutError``). ``deadline``: when the patience runs out, if the
        caller's began earlier (a batch's).
        """
        return self._write(outcome, wait, self._clock() + self._patience)

    def _write(self, outcome: Outcome, wait: _Wait, deadline: float) -> bool:
        backoff = Backoff(base=OUTCOME_RETRY_BASE_S, cap=OUTCOME_RETRY_CAP_S)
        while True:
            try:
                (written,) = self._attempt([_finish_of(outcome)], wait, deadline)
            except errors.PersistenceError as exc:
                # A permanent error (or a bug) is not retried: it would fail every time.
                if isinstance(exc, errors.PermanentPersistenceError):
                    raise
                if self._stop.is_set() or self._clock() >= deadline:
                    self._keep(outcome)
                    raise
                delay = min(backoff.next_delay(), max(deadline - self._clock(), 0.0))
                log.warning(
                    "outcome write failed; retrying",
                    extra=self._extra(outcome, error=str(exc), retry_in_s=delay),
                )
                wait(delay)
                continue
            # Written, or refused as stale: either way there is nothing left to write.
            self._kept.pop(outcome.task_run_id)
            self._record_output(outcome)
            return written

    def write_all(
        self, outcomes: Sequence[Outcome], wait: _Wait
    ) -> list[bool | errors.PersistenceError]:
        """Write ``outcomes`` (a worker's batch) together: the successes of tasks no
        other task depends on in one transaction (``FlowForge.finish_task_runs``).
        Whether each was recorded, in order; or the ``PersistenceError`` it ended with.

        If that fails, each is written on its own with :meth:`write`'s retries, so a
        database outage costs no outcome more than it would alone (an outcome the
        failed attempt did record reads as stale then, as after any lost COMMIT). Once
        one has waited out the patience, the rest are kept at once: an outage costs a
        batch one patience, not one per outcome, its first attempt included.
        """
        deadline = self._clock() + self._patience
        finishes = [_finish_of(outcome) for outcome in outcomes]
        try:
            written: list[bool | errors.PersistenceError] = list(
                self._attempt(finishes, wait, deadline)
            )
        except errors.PermanentPersistenceError:
            raise
        except errors.PersistenceError as exc:
            log.warning(
                "batched outcome write failed; writing each on its own",
                extra={"worker_id": self._worker_id, "outcomes": len(outcomes), "error": str(exc)},
            )
            return self._write_each(outcomes, wait, deadline)
        for outcome in outcomes:
            self._kept.pop(outcome.task_run_id)
            self._record_output(outcome)
        return written

    def _record_output(self, outcome: Outcome) -> None:
        """Store the attempt's output once its outcome is durable (a handler that
        printed nothing costs nothing here). Its own transaction, after the finish: the
        finish's (a batch's leaves in one round trip) stays as it is, and an output
        that cannot be stored costs the attempt nothing but its log (docs/logs.md)."""
        if outcome.output is None:
            return
        try:
            self._app.record_attempt_log(
                outcome.task_run_id,
                outcome.fencing_token,
                attempt=outcome.attempt,
                worker_id=self._worker_id,
                output=outcome.output.text,
                dropped_chars=outcome.output.dropped_chars,
            )
        except errors.PersistenceError as exc:
            log.warning(
                "attempt output not stored (its outcome is)",
                extra=self._extra(outcome, error=str(exc)),
            )

    def _attempt(self, finishes: list[Finish], wait: _Wait, deadline: float) -> list[bool]:
        """One write attempt, on the lane; waited for until ``deadline`` at most,
        ``wait`` servicing the broker between two looks."""
        answer: list[list[bool] | BaseException] = []

        def attempt() -> None:
            try:
                answer.append(self._app.finish_task_runs(finishes, actor=self._worker_id))
            except BaseException as exc:  # noqa: BLE001 - raised in the worker's thread, below
                answer.append(exc)

        done = self._lane.run(attempt)
        while not done.wait(ATTEMPT_SLICE_S):
            # Not on a stop: a stopping worker still finishes its in-flight message
            # (docs/worker.md); a stop ends the retries after a failed attempt.
            if self._clock() >= deadline:
                raise self._timed_out()
            wait(ATTEMPT_SLICE_S)
        (result,) = answer
        if isinstance(result, BaseException):
            raise result
        return result

    def _timed_out(self) -> errors.OutcomeWriteTimedOutError:
        return errors.OutcomeWriteTimedOutError(
            f"The database did not answer an outcome write within the worker's outcome "
            f"patience ({self._patience:g} s); the outcome is kept for its dispatch's "
            f"redelivery. Check that the database is reachable, or give the worker more "
            f"patience."
        )

    def _write_each(
        self, outcomes: Sequence[Outcome], wait: _Wait, deadline: float
    ) -> list[bool | errors.PersistenceError]:
        written: list[bool | errors.PersistenceError] = []
        gave_up: errors.PersistenceError | None = None
        for outcome in outcomes:
            if gave_up is None and self._clock() >= deadline:
                gave_up = self._timed_out()  # the batch's attempt took the patience
            if gave_up is not None:
                self._keep(outcome)
                written.append(gave_up)
                continue
            try:
                written.append(self._write(outcome, wait, deadline))
            except errors.PermanentPersistenceError:
                raise
            except errors.PersistenceError as failed:
                gave_up = failed
                written.append(failed)
        return written

    def keep(self, outcome: Outcome) -> None:
        """Keep ``outcome`` for its dispatch's redelivery (it could not be written)."""
        self._keep(outcome)

    def _keep(self, outcome: Outcome) -> None:
        self._kept.put(outcome.task_run_id, outcome)
        log.warning(
            "outcome not written; kept for the redelivery",
            extra=self._extra(outcome, kept=len(self._kept)),
        )

    def _extra(self, outcome: Outcome, **fields: Any) -> dict[str, Any]:
        return {
            "worker_id": self._worker_id,
            "task_run_id": str(outcome.task_run_id),
            "task_key": outcome.task_key,
            "attempt": outcome.attempt,
            "fencing_token": outcome.fencing_token,
            **fields,
        }


def _finish_of(outcome: Outcome) -> Finish:
    return Finish(
        outcome.task_run_id, outcome.fencing_token, outcome.edge, outcome.result, outcome.error
    )
