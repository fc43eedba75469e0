"""The worker: consume a dispatch, claim, run a trusted handler, write the outcome, ack.

The order is the guarantee. The claim (READY to RUNNING, new fencing token) decides
whether this worker runs the task at all; the outcome is written with that token, so a
worker whose lease was reaped writes nothing; and the message is acked only after the
outcome is durable. A failed outcome write is retried while the message stays
unsettled (``flowforge.processes.outcome``); if it cannot be written in time, the
message is requeued, never acked, and the outcome kept for its redelivery. The worker
is at-least-once: a crash between the commit and the ack redelivers the message, and
the claim makes that redelivery harmless (it matches no ready row and is acked).

A worker is never held hostage by its handler. When the heartbeat finds the lease lost
while the handler runs (the task timed out, was cancelled, or was reaped), the attempt is
no longer this worker's: it stops waiting, leaves the handler running on its own thread
(Python cannot kill a thread), settles the message and takes the next one on a fresh
thread. Past ``max_abandoned`` abandoned handlers still running it raises
``HandlersHungError`` and the process exits, so that its supervisor restarts it.

A broker connection lost while a handler runs does not abandon the task: the heartbeat
goes on, the handler's outcome is written when it returns, and only then does the
worker notice the loss (the settle fails) and reconnect. It takes no new message while
a handler of its still runs; the redelivered message finds the task done and is acked.

The claim and its fallback are ``flowforge.processes.claim``; the batch path
(``--batch N``) is ``flowforge.processes.batch``, which takes this worker's steps.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from flowforge import errors, metrics, tracing
from flowforge.aggregates import failures
from flowforge.aggregates.dispatch import DispatchMessage, decode_dispatch
from flowforge.app.results import Claim, TaskRunView
from flowforge.app.service import FlowForge
from flowforge.backoff import Backoff
from flowforge.limits import batch_size
from flowforge.processes import settle, telemetry
from flowforge.processes.batch import Batch
from flowforge.processes.claim import Claimer
from flowforge.processes.handler_call import HandlerCall, error_details
from flowforge.processes.heartbeat import Heartbeat
from flowforge.processes.lane import Lane
from flowforge.processes.loop import Stop
from flowforge.processes.outcome import OUTCOME_WRITE_PATIENCE_S, Outcome, OutcomeWriter
from flowforge.processes.registry import TaskContext, TaskRegistry, default_registry
from flowforge.processes.run_cache import RUN_CACHE_SIZE, RunCache
from flowforge.processes.settle import Settlement
from flowforge.processes.transport import Delivery, DispatchConsumer

log = logging.getLogger(__name__)

_Step = TypeVar("_Step")

#: How long one wait for a message lasts before the loop checks for a stop.
POLL_INTERVAL_S = 0.5
#: How often the connection is serviced while a handler runs.
PUMP_INTERVAL_S = 0.05
#: Abandoned handlers (lease lost, still running) a worker keeps before it exits: each
#: holds a thread and whatever the handler holds.
MAX_ABANDONED_HANDLERS = 4
#: The error type an abandoned attempt's outcome carries (it is stale: written nowhere).
ABANDONED = "HandlerAbandoned"


def heartbeat_start_after(lease_seconds: float) -> float:
    """How long a handler runs before its heartbeat is handed to the lane: one pump
    interval (the worker looks once per interval), unless the lease is so short that
    its first renewal could be due before the worker's second look (then at once)."""
    return PUMP_INTERVAL_S if lease_seconds / 3 >= 2 * PUMP_INTERVAL_S else 0.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class Worker:
    """Consumes dispatches with manual acks, one at a time (prefetch 1) or, with
    ``batch`` > 1, the ones already waiting together (:meth:`handle_batch`), until
    stopped."""

    def __init__(
        self,
        app: FlowForge,
        connect: Callable[[], DispatchConsumer],
        *,
        registry: TaskRegistry = default_registry,
        worker_id: str | None = None,
        stop: Stop | None = None,
        backoff: Backoff | None = None,
        outcome_patience: float = OUTCOME_WRITE_PATIENCE_S,
        batch: int = 1,
        max_abandoned: int = MAX_ABANDONED_HANDLERS,
    ) -> None:
        self.app = app
        self._connect = connect
        #: Deliveries taken at once when they are already there (``handle_batch``).
        self.batch = batch_size(batch, "batch")
        self.registry = registry
        self.worker_id = worker_id or default_worker_id()
        self.stop = stop or Stop()
        self.backoff = backoff or Backoff()
        self.outcomes = OutcomeWriter(app, self.worker_id, self.stop, patience=outcome_patience)
        #: The runs this worker has met: room for a whole batch's, claimed and read.
        self._runs = RunCache(app.definitions, max(RUN_CACHE_SIZE, 3 * self.batch))
        self.claimer = Claimer(app, self.worker_id, self._runs)
        #: One thread each for the handlers and the heartbeats, reused task after task.
        self._handlers = Lane(f"handler-{self.worker_id}")
        self._beats = Lane(f"heartbeat-{self.worker_id}")
        #: Handlers left running after their lease was lost, each on its own lane.
        self._abandoned: list[HandlerCall] = []
        self.max_abandoned = max_abandoned

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Consume until stopped; reconnect with capped, jittered backoff on broker loss.

        ``QueueTypeMismatchError`` is raised at once: no reconnect turns a classic
        queue into a quorum queue.
        """
        self.stop.install_signal_handlers()
        log.info("worker started", extra=self._extra(task_types=list(self.registry)))
        while not self.stop.is_set():
            try:
                self._consume()
            except errors.QueueTypeMismatchError:
                raise
            except errors.BrokerUnavailableError as exc:
                metrics.RECONNECTS.labels("broker").inc()
                delay = self.backoff.next_delay()
                log.warning(
                    "broker connection lost; reconnecting",
                    extra=self._extra(
                        error=str(exc), attempt=self.backoff.failures, retry_in_s=delay
                    ),
                )
                self.stop.wait(delay)
        log.info("worker stopped", extra=self._extra(reason=self.stop.reason))

    def _consume(self) -> None:
        consumer = self._connect()
        try:
            while not self.stop.is_set():
                delivery = consumer.get(POLL_INTERVAL_S)
                self.backoff.connected()  # a get that returned: the connection works
                if delivery is None:
                    continue
                deliveries = [delivery]
                # What has already arrived joins the batch; nothing is waited for.
                while len(deliveries) < self.batch and (more := consumer.get(0)) is not None:
                    deliveries.append(more)
                if len(deliveries) == 1:
                    self.handle(delivery, consumer)
                else:
                    self.handle_batch(deliveries, consumer)
                self._check_abandoned()
        finally:
            consumer.close()

    # --- one message, or a batch ------------------------------------------------------

    def handle(self, delivery: Delivery, consumer: DispatchConsumer) -> str:
        """Settle one delivery exactly once; returns what happened (for logs and tests).

        The code paths compute the settlement; the ``finally`` performs it, on every
        path. An exception nobody expected leaves ``settlement`` unset: the message is
        requeued and the exception goes on up.
        """
        settlement: Settlement | None = None
        try:
            settlement = self._process(delivery, consumer)
            return settlement.result
        finally:
            self._settle(delivery, settlement)

    def handle_batch(
        self, deliveries: Sequence[Delivery], consumer: DispatchConsumer
    ) -> list[str]:
        """Settle each delivery exactly once, as :meth:`handle` does one, with ONE claim
        for the batch and its outcomes written together (``processes/batch.py``); what
        happened to each, in order."""
        return Batch(self, consumer, list(deliveries)).handle()

    def _process(self, delivery: Delivery, consumer: DispatchConsumer) -> Settlement:
        admitted = self._admit(delivery)
        if isinstance(admitted, Settlement):
            return admitted
        return self._guarded(
            admitted,
            lambda: settle.ack(self._claim_and_run(admitted, delivery.headers, consumer)),
        )

    def _admit(self, delivery: Delivery) -> DispatchMessage | Settlement:
        """The delivery's dispatch if it is this deployment's; else its settlement."""
        try:
            message = decode_dispatch(delivery.body)
        except errors.MalformedDispatchError as exc:
            return self._unsettled(settle.for_error(exc), exc)
        if message.deployment is not None and message.deployment != self.app.deployment_id:
            return self._foreign(message)
        return message

    def _foreign(self, message: DispatchMessage) -> Settlement:
        """A dispatch of another deployment: logged as an error naming both."""
        log.error(
            settle.FOREIGN.reason,
            extra=self._extra(
                deployment=self.app.deployment_id,
                message_deployment=message.deployment,
                task_run_id=str(message.task_run_id),
                task_key=message.task_key,
            ),
        )
        return settle.FOREIGN

    def _guarded(self, message: DispatchMessage, step: Callable[[], _Step]) -> _Step | Settlement:
        """What ``step`` returns, or the settlement its database error calls for."""
        try:
            return step()
        except (errors.NotFoundError, errors.PersistenceError) as exc:
            return self._unsettled(settle.for_error(exc), exc, task_run_id=message.task_run_id)

    def _claim_and_run(
        self, message: DispatchMessage, headers: Mapping[str, object], consumer: DispatchConsumer
    ) -> str:
        kept = self.outcomes.kept(message.task_run_id)
        if kept is not None:
            # The handler already ran here; only its outcome's write failed. Write it
            # now instead of running the handler a second time.
            return self._write(kept, consumer)
        began = tracing.now_ns()
        claimed = self.claimer.claim(message.task_run_id)
        if isinstance(claimed, str):
            return claimed
        task, claim, lease_seconds = claimed
        with self.attempt_started(task, claim, lease_seconds, headers, began) as span:
            outcome = self._execute(task, claim, lease_seconds, consumer, span=span)
            return span.end(self._write(outcome, consumer), outcome.error)

    def attempt_started(
        self,
        task: TaskRunView,
        claim: Claim,
        lease_seconds: float,
        headers: Mapping[str, object],
        began_ns: int,
    ) -> tracing.AttemptSpan:
        """The attempt's span, from ``began_ns`` (before its claim); its dispatch's
        wait counted (``processes/telemetry.py``)."""
        return telemetry.attempt_started(
            task, claim, lease_seconds, headers, worker_id=self.worker_id, began_ns=began_ns
        )

    # --- running a task ---------------------------------------------------------------

    def _execute(
        self,
        task: TaskRunView,
        claim: Claim,
        lease_seconds: float,
        consumer: DispatchConsumer,
        meanwhile: Callable[[], None] = lambda: None,
        *,
        span: tracing.AttemptSpan | None = None,
    ) -> Outcome:
        """Run the handler in a thread beside the heartbeat, servicing the connection
        (and doing ``meanwhile``, a batch's due writes) while it runs; its outcome.
        The handler runs with ``span`` (the attempt's) as its current span."""
        try:
            handler = self.registry.get(task.task_type)
        except errors.UnknownTaskTypeError as exc:
            return _outcome(task, claim, None, error_details(exc))
        context = self._context(task, claim)
        heartbeat = Heartbeat(
            self.app,
            claim,
            lease_seconds,
            self.worker_id,
            self._beats,
            start_after=heartbeat_start_after(lease_seconds),
        )
        call = HandlerCall(handler, context, self._handlers, span=span)
        began = time.perf_counter()
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
        result, error = call.outcome()
        outcome = "fail" if error is not None else "succeed"
        metrics.HANDLER_SECONDS.labels(task.task_type, outcome).observe(
            time.perf_counter() - began
        )
        return _outcome(task, claim, result, error)

    def _abandon(self, task: TaskRunView, claim: Claim, call: HandlerCall) -> Outcome:
        """Stop waiting for a handler whose lease is lost: it goes on on its lane, and
        the next handler gets a new one. Its outcome is stale by construction (the
        token has moved on or the task has left running), so it is written nowhere."""
        self._abandoned.append(call)
        self._handlers = Lane(f"handler-{self.worker_id}-{len(self._abandoned)}")
        log.warning(
            "lease lost while the handler runs; handler abandoned, taking the next task",
            extra=self._extra(
                task_run_id=str(task.id),
                task_key=task.task_key,
                attempt=claim.attempt,
                fencing_token=claim.fencing_token,
                abandoned_running=self.abandoned_running,
                max_abandoned=self.max_abandoned,
            ),
        )
        message = "the lease was lost while the handler ran; the worker stopped waiting"
        return _outcome(task, claim, None, {"type": ABANDONED, "message": message})

    @property
    def abandoned_running(self) -> int:
        """How many abandoned handlers are still running (one that returned is gone)."""
        self._abandoned = [call for call in self._abandoned if not call.join(0)]
        return len(self._abandoned)

    def _check_abandoned(self) -> None:
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
        # a root task asks nothing.
        results = self.app.task_results(run_id, task.depends_on) if task.depends_on else {}
        return TaskContext(
            task_run_id=task.id,
            workflow_run_id=run_id,
            task_key=task.task_key,
            task_type=task.task_type,
            inputs=self._runs.facts(task.workflow_run_id).inputs,
            upstream={key: results.get(key) for key in task.depends_on},
            attempt=claim.attempt,
            fencing_token=claim.fencing_token,
            worker_id=self.worker_id,
        )

    def _service(self, consumer: DispatchConsumer, seconds: float) -> None:
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
                extra=self._extra(error=str(exc)),
            )

    # --- the outcome and the settlement -----------------------------------------------

    def _write(self, outcome: Outcome, consumer: DispatchConsumer) -> str:
        written = self.outcomes.write(outcome, lambda seconds: self._service(consumer, seconds))
        return self._written(outcome, written)

    def _written(self, outcome: Outcome, written: bool) -> str:
        """Log a written (or stale) outcome; what happened."""
        failure: dict[str, str] = {}
        if outcome.error is not None:
            # The exception where an operator looks first: type, message, innermost frames.
            failure = {
                "error": failures.summary(outcome.error),
                "at": " < ".join(reversed(failures.last_frames(outcome.error))),
            }
        if not written:
            metrics.STALE_FINISHES.inc()
        log.info(
            "task finished" if written else "stale finish discarded (lease lost)",
            extra=self._extra(
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

    def _settle(
        self, delivery: Delivery, settlement: Settlement | None, *, back_off: bool = True
    ) -> None:
        if settlement is None:
            try:
                settle.perform(delivery, settle.UNEXPECTED.action)
            except errors.BrokerError as exc:
                # The connection is gone too: the broker requeues the message itself.
                # The error on its way up is the one that matters.
                log.debug("requeue after an error failed", extra=self._extra(error=str(exc)))
            return
        settle.perform(delivery, settlement.action)
        if back_off and settlement.back_off:
            self._back_off()

    def _back_off(self) -> None:
        """Wait before taking the next message: the database is down, do not spin."""
        self.stop.wait(POLL_INTERVAL_S)

    def _unsettled(
        self, settlement: Settlement, exc: BaseException, task_run_id: uuid.UUID | None = None
    ) -> Settlement:
        fields: dict[str, Any] = {"reason": str(exc)}
        if task_run_id is not None:
            fields["task_run_id"] = str(task_run_id)
        log.warning(settlement.reason, extra=self._extra(**fields))
        return settlement

    def _extra(self, **fields: Any) -> dict[str, Any]:
        return {"worker_id": self.worker_id, **fields}


def _outcome(
    task: TaskRunView, claim: Claim, result: Any, error: dict[str, str] | None
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
    )
