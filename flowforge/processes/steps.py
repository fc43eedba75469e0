"""A worker's steps with one delivery: admit it, claim its task, run the handler beside
its heartbeat, write the outcome, settle the message. The worker takes them one delivery
at a time (``flowforge.processes.worker``), a batch in a batch's order
(``flowforge.processes.batch``); both through this public interface, so neither reaches
into the other.

A worker is never held hostage by its handler: when the heartbeat finds the lease lost
while the handler runs, :meth:`Steps.execute` stops waiting, leaves the handler running
on its own lane (Python cannot kill a thread) and the next one gets a fresh lane; past
``max_abandoned`` still running, :meth:`Steps.check_abandoned` raises
``HandlersHungError`` and the process exits, so that its supervisor restarts it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flowforge import errors, observe
from flowforge.aggregates import failures, lost_workers
from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch
from flowforge.app.results import Claim, TaskRunView
from flowforge.app.service import FlowForge
from flowforge.processes import capture, settle, telemetry
from flowforge.processes.claim import Claimer
from flowforge.processes.handler_call import HandlerCall, error_details
from flowforge.processes.heartbeat import Heartbeat
from flowforge.processes.lane import Lane
from flowforge.processes.loop import Stop
from flowforge.processes.outcome import Outcome, OutcomeWriter
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.run_cache import RUN_CACHE_SIZE, RunCache
from flowforge.processes.settle import Settlement
from flowforge.processes.transport import Delivery, DispatchConsumer

# The worker's log: an operator follows a worker's lines under one logger name.
log = logging.getLogger("flowforge.processes.worker")

_Step = TypeVar("_Step")

#: How long one wait for a message lasts before the loop checks for a stop; and how long
#: a worker waits before its next message when the database is down.
POLL_INTERVAL_S = 0.5
#: How often the connection is serviced while a handler runs.
PUMP_INTERVAL_S = 0.05
#: The error type an abandoned attempt's outcome carries (it is stale: written nowhere).
ABANDONED = "HandlerAbandoned"


def heartbeat_start_after(lease_seconds: float) -> float:
    """How long a handler runs before its heartbeat is handed to the lane: one pump
    interval (the worker looks once per interval), unless the lease is so short that
    its first renewal could be due before the worker's second look (then at once)."""
    return PUMP_INTERVAL_S if lease_seconds / 3 >= 2 * PUMP_INTERVAL_S else 0.0


class Steps:
    """One worker's steps, with what they share: its outcome writer (and the outcomes it
    keeps), its claimer and run cache, its handler and heartbeat lanes."""

    def __init__(
        self,
        app: FlowForge,
        registry: TaskRegistry,
        worker_id: str,
        stop: Stop,
        *,
        outcome_patience: float,
        batch: int,
        max_abandoned: int,
    ) -> None:
        self.app = app
        self.registry = registry
        self.worker_id = worker_id
        self.stop = stop
        self.outcomes = OutcomeWriter(app, worker_id, stop, patience=outcome_patience)
        #: The runs this worker has met: room for a whole batch's, claimed and read.
        self._runs = RunCache(app.definitions, max(RUN_CACHE_SIZE, 3 * batch))
        self.claimer = Claimer(app, worker_id, self._runs)
        #: One thread each for the handlers and the heartbeats, reused task after task.
        self._handlers = Lane(f"handler-{worker_id}")
        self._beats = Lane(f"heartbeat-{worker_id}")
        #: Handlers left running after their lease was lost, each on its own lane.
        self._abandoned: list[HandlerCall] = []
        self.max_abandoned = max_abandoned
        #: Whether a handler runs now (what a stop waits for: ``Processes.run_workers``).
        self.handling = False
        # Each attempt's prints and log records go to its own buffer (capture.py).
        capture.install()

    # --- admitting and claiming -------------------------------------------------------

    def process(self, delivery: Delivery, consumer: DispatchConsumer) -> Settlement:
        """Every step for one delivery but the settlement: what it calls for."""
        admitted = self.admit(delivery)
        if isinstance(admitted, Settlement):
            return admitted
        return self.guarded(
            admitted,
            lambda: settle.ack(self._claim_and_run(admitted, delivery.headers, consumer)),
        )

    def admit(self, delivery: Delivery) -> DispatchMessage | Settlement:
        """The delivery's dispatch if it is this deployment's; else its settlement."""
        try:
            message = decode_dispatch(delivery.body)
        except errors.MalformedDispatchError as exc:
            return self.unsettled(settle.for_error(exc), exc)
        if message.deployment is not None and message.deployment != self.app.deployment_id:
            return self._foreign(message)
        return message

    def _foreign(self, message: DispatchMessage) -> Settlement:
        """A dispatch of another deployment: logged as an error naming both."""
        log.error(
            settle.FOREIGN.reason,
            extra=self.extra(
                deployment=self.app.deployment_id,
                message_deployment=message.deployment,
                task_run_id=str(message.task_run_id),
                task_key=message.task_key,
            ),
        )
        return settle.FOREIGN

    def guarded(self, message: DispatchMessage, step: Callable[[], _Step]) -> _Step | Settlement:
        """What ``step`` returns, or the settlement its database error calls for."""
        try:
            return step()
        except (errors.NotFoundError, errors.PersistenceError) as exc:
            return self.unsettled(settle.for_error(exc), exc, task_run_id=message.task_run_id)

    def _claim_and_run(
        self, message: DispatchMessage, headers: Mapping[str, object], consumer: DispatchConsumer
    ) -> str:
        kept = self.outcomes.kept(message.task_run_id)
        if kept is not None:
            # The handler already ran here; only its outcome's write failed. Write it
            # now instead of running the handler a second time.
            return self._write(kept, consumer)
        began = time.time_ns()
        claimed = self.claimer.claim(message.task_run_id)
        if isinstance(claimed, str):
            return claimed
        task, claim, lease_seconds = claimed
        with self.attempt_started(task, claim, lease_seconds, headers, began) as watch:
            outcome = self.execute(task, claim, lease_seconds, consumer, watch=watch)
            return watch.end(self._write(outcome, consumer), outcome.error)

    def attempt_started(
        self,
        task: TaskRunView,
        claim: Claim,
        lease_seconds: float,
        headers: Mapping[str, object],
        began_ns: int,
    ) -> observe.AttemptWatch:
        """The attempt announced, from ``began_ns`` (before its claim): what watches it."""
        return telemetry.attempt_started(
            task, claim, lease_seconds, headers, worker_id=self.worker_id, began_ns=began_ns
        )

    # --- running a task ---------------------------------------------------------------

    def execute(
        self,
        task: TaskRunView,
        claim: Claim,
        lease_seconds: float,
        consumer: DispatchConsumer,
        meanwhile: Callable[[], None] = lambda: None,
        *,
        watch: observe.AttemptWatch,
    ) -> Outcome:
        """Run the handler in a thread beside the heartbeat, servicing the connection
        (and doing ``meanwhile``, a batch's due writes) while it runs; its outcome.
        The handler runs inside ``watch.current()`` (its span the current one)."""
        try:
            handler = self.registry.get(task.task_type)
        except errors.UnknownTaskTypeError as exc:
            return _outcome(task, claim, None, error_details(exc))
        if task.worker_losses:
            self._lost_before(task, claim)
        heartbeat = Heartbeat(
            self.app,
            claim,
            lease_seconds,
            self.worker_id,
            self._beats,
            start_after=heartbeat_start_after(lease_seconds),
        )
        call = HandlerCall(handler, self._context(task, claim), self._handlers, watch=watch)
        began = time.perf_counter()
        self.handling = True
        try:
            with heartbeat:
                call.start()
                while not call.join(PUMP_INTERVAL_S):
                    # Before anything that may block (a batch's due writes): the renewals
                    # never wait for the consumer thread once they are handed over.
                    heartbeat.keep_up()
                    if heartbeat.lost:
                        return self._abandon(task, claim, call)
                    self._pump(consumer, 0)
                    meanwhile()
        finally:
            self.handling = False
        result, error = call.outcome()
        outcome = _outcome(task, claim, result, error, call.output.captured())
        observe.announce.handler_returned(
            task.task_type, outcome.edge, time.perf_counter() - began
        )
        return outcome

    def _lost_before(self, task: TaskRunView, claim: Claim) -> None:
        """Say, as it starts, that a task lost its worker before (its handler may be
        what kills the worker): rare, so a line only then, none on the hot path."""
        log.warning(
            "task starting that lost its worker before",
            extra=self.extra(
                task_run_id=str(task.id),
                task_key=task.task_key,
                attempt=claim.attempt,
                fencing_token=claim.fencing_token,
                worker_losses=task.worker_losses,
                max_worker_losses=lost_workers.worker_losses_bound(task.max_worker_losses),
            ),
        )

    def _abandon(self, task: TaskRunView, claim: Claim, call: HandlerCall) -> Outcome:
        """Stop waiting for a handler whose lease is lost: it goes on on its lane, and
        the next handler gets a new one. Its outcome is stale by construction (the
        token has moved on or the task has left running), so it is written nowhere."""
        self._abandoned.append(call)
        self._handlers = Lane(f"handler-{self.worker_id}-{len(self._abandoned)}")
        log.warning(
            "lease lost while the handler runs; handler abandoned, taking the next task",
            extra=self.extra(
                task_run_id=str(task.id),
                task_key=task.task_key,
                attempt=claim.attempt,
                fencing_token=claim.fencing_token,
                abandoned_running=self.abandoned_running,
                max_abandoned=self.max_abandoned,
            ),
        )
        message = "the lease was lost while the handler ran; the worker stopped waiting"
        # What it printed so far is kept with the attempt; what it prints later is not.
        error = {"type": ABANDONED, "message": message}
        return _outcome(task, claim, None, error, call.output.captured())

    @property
    def abandoned_running(self) -> int:
        """How many abandoned handlers are still running (one that returned is gone)."""
        self._abandoned = [call for call in self._abandoned if not call.join(0)]
        return len(self._abandoned)

    def check_abandoned(self) -> None:
        if self.abandoned_running > self.max_abandoned:
            raise errors.HandlersHungError(
                f"worker {self.worker_id} has {self.abandoned_running} abandoned handlers "
                f"still running (at most {self.max_abandoned}): each kept running after "
                f"its task's lease was lost (timed out, cancelled or reaped). Exiting so "
                f"that the supervisor restarts the worker; give the handler that hangs a "
                f"timeout of its own (the log names each task abandoned)"
            )

    def _context(self, task: TaskRunView, claim: Claim) -> TaskContext:
        run_id = task.workflow_run_id
        # Its own dependencies' rows only: a task of an N-task run costs O(1), not O(N);
        # a root task asks nothing, nor does an element of a mapped task: its input is
        # its element (ctx.item), not its upstream's whole list, read again by each.
        upstream = task.depends_on if task.map_index is None else []
        results = self.app.task_results(run_id, upstream) if upstream else {}
        return TaskContext(
            task_run_id=task.id,
            workflow_run_id=run_id,
            task_key=task.task_key,
            task_type=task.task_type,
            inputs=self._runs.facts(task.workflow_run_id).inputs,
            upstream={key: results.get(key) for key in upstream},
            attempt=claim.attempt,
            fencing_token=claim.fencing_token,
            worker_id=self.worker_id,
            item=task.map_item,
            index=task.map_index,
        )

    def service(self, consumer: DispatchConsumer, seconds: float) -> None:
        """Service the connection for ``seconds``, or until a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
            self._pump(consumer, min(PUMP_INTERVAL_S, left))

    def _pump(self, consumer: DispatchConsumer, seconds: float) -> None:
        try:
            consumer.pump(seconds)
        except errors.BrokerUnavailableError as exc:
            # The held message will be redelivered. The handler goes on (and its
            # heartbeat), its outcome is still written, and the failed settle then
            # reconnects; the redelivery finds the task done. Later pumps just wait.
            log.warning(
                "broker connection lost while a task runs; finishing the task first",
                extra=self.extra(error=str(exc)),
            )

    # --- the outcome and the settlement -----------------------------------------------

    def _write(self, outcome: Outcome, consumer: DispatchConsumer) -> str:
        written = self.outcomes.write(outcome, lambda seconds: self.service(consumer, seconds))
        return self.written(outcome, written)

    def written(self, outcome: Outcome, written: bool) -> str:
        """Log a written (or stale) outcome; what happened."""
        failure: dict[str, str] = {}
        if outcome.error is not None:
            # The exception where an operator looks first: type, message, innermost frames.
            failure = {
                "error": failures.summary(outcome.error),
                "at": " < ".join(reversed(failures.last_frames(outcome.error))),
            }
        if not written:
            observe.announce.stale_finish()
        log.info(
            "task finished" if written else "stale finish discarded (lease lost)",
            extra=self.extra(
                workflow_run_id=str(outcome.workflow_run_id),
                task_run_id=str(outcome.task_run_id),
                task_key=outcome.task_key,
                attempt=outcome.attempt,
                fencing_token=outcome.fencing_token,
                outcome=outcome.edge if written else "stale",
                **failure,
            ),
        )
        return outcome.edge if written else "stale"

    def settle(
        self, delivery: Delivery, settlement: Settlement | None, *, back_off: bool = True
    ) -> None:
        """Perform ``settlement``; None (an error nobody expected): requeue quietly."""
        if settlement is None:
            try:
                settle.perform(delivery, settle.UNEXPECTED.action)
            except errors.BrokerError as exc:
                # The connection is gone too: the broker requeues the message itself.
                # The error on its way up is the one that matters.
                log.debug("requeue after an error failed", extra=self.extra(error=str(exc)))
            return
        settle.perform(delivery, settlement.action)
        if back_off and settlement.back_off:
            self.back_off()

    def back_off(self) -> None:
        """Wait before taking the next message: the database is down, do not spin."""
        self.stop.wait(POLL_INTERVAL_S)

    def unsettled(
        self, settlement: Settlement, exc: BaseException, task_run_id: uuid.UUID | None = None
    ) -> Settlement:
        fields: dict[str, Any] = {"reason": str(exc)}
        if task_run_id is not None:
            fields["task_run_id"] = str(task_run_id)
        log.warning(settlement.reason, extra=self.extra(**fields))
        return settlement

    def extra(self, **fields: Any) -> dict[str, Any]:
        """A log line's fields, with this worker's id."""
        return {"worker_id": self.worker_id, **fields}


def _outcome(
    task: TaskRunView,
    claim: Claim,
    result: Any,
    error: dict[str, str] | None,
    output: capture.Captured | None = None,
) -> Outcome:
    return Outcome(
        task_run_id=task.id,
        task_key=task.task_key,
        attempt=claim.attempt,
        fencing_token=claim.fencing_token,
        edge="fail" if error is not None else "succeed",
        result=result,
        error=error,
        workflow_run_id=task.workflow_run_id,
        output=output,
    )
