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

This module is the loop. The steps it takes with each delivery (admit, claim, run,
write, settle) are ``flowforge.processes.steps``, the claim ``flowforge.processes.claim``;
the batch path (``--batch N``) is ``flowforge.processes.batch``, which takes the same
steps in a batch's order.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Sequence

from flowforge import errors, observe
from flowforge.app.service import FlowForge
from flowforge.backoff import Backoff
from flowforge.bounds import batch_size
from flowforge.processes.batch import Batch
from flowforge.processes.loop import Stop
from flowforge.processes.outcome import OUTCOME_WRITE_PATIENCE_S
from flowforge.processes.registry import TaskRegistry, default_registry
from flowforge.processes.settle import Settlement
from flowforge.processes.steps import POLL_INTERVAL_S, Steps
from flowforge.processes.transport import Delivery, DispatchConsumer

log = logging.getLogger(__name__)

#: Abandoned handlers (lease lost, still running) a worker keeps before it exits: each
#: holds a thread and whatever the handler holds.
MAX_ABANDONED_HANDLERS = 4


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
        task_types: Sequence[str] | None = None,
    ) -> None:
        self.app = app
        #: The types it consumes (``--types``; default: every type it has a handler for).
        self.task_types = sorted(task_types) if task_types else None
        self._connect = connect
        #: Deliveries taken at once when they are already there (``handle_batch``).
        self.batch = batch_size(batch, "batch")
        self.registry = registry
        self.worker_id = worker_id or default_worker_id()
        self.stop = stop or Stop()
        self.backoff = backoff or Backoff()
        #: What it does with each delivery (shared with its batches).
        self.steps = Steps(
            app,
            registry,
            self.worker_id,
            self.stop,
            outcome_patience=outcome_patience,
            batch=self.batch,
            max_abandoned=max_abandoned,
        )

    @property
    def abandoned_running(self) -> int:
        """How many abandoned handlers are still running (one that returned is gone)."""
        return self.steps.abandoned_running

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Consume until stopped; reconnect with capped, jittered backoff on broker loss.

        ``QueueTypeMismatchError`` is raised at once: no reconnect turns a classic
        queue into a quorum queue.
        """
        self.stop.install_signal_handlers()
        self._announce_start()
        while not self.stop.is_set():
            try:
                self._consume()
            except errors.QueueTypeMismatchError:
                raise
            except errors.BrokerUnavailableError as exc:
                observe.announce.reconnected("broker")
                delay = self.backoff.next_delay()
                log.warning(
                    "broker connection lost; reconnecting",
                    extra=self.steps.extra(
                        error=str(exc), attempt=self.backoff.failures, retry_in_s=delay
                    ),
                )
                self.stop.wait(delay)
        log.info("worker stopped", extra=self.steps.extra(reason=self.stop.reason))

    def _announce_start(self) -> None:
        """The start line: the types it consumes, and, if this worker id still holds
        tasks, that it starts again after stopping with them in hand (its process
        ended with a handler running: a crash, a kill, or the handler itself)."""
        fields: dict[str, object] = {"task_types": self.task_types or list(self.registry)}
        try:
            held = self.app.tasks_leased_by(self.worker_id)
        except errors.PersistenceError:
            held = []  # the loop reports the database; the start line does not wait
        if not held:
            log.info("worker started", extra=self.steps.extra(**fields))
            return
        log.warning(
            "worker started again after it stopped with tasks in hand: its process ended "
            "while their handlers ran (killed, crashed, or ended by a handler); their "
            "leases expire and the reaper makes them ready again",
            extra=self.steps.extra(
                **fields,
                held_tasks=[f"{t.workflow_run_id}/{t.task_key}" for t in held],
                held_attempts=[t.attempt for t in held],
                worker_losses=[t.worker_losses for t in held],
            ),
        )

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
                self.steps.check_abandoned()
        finally:
            consumer.close()

    # --- one message, or a batch ------------------------------------------------------

    def handle(self, delivery: Delivery, consumer: DispatchConsumer) -> str:
        """Settle one delivery exactly once; returns what happened (for logs and tests).

        The steps compute the settlement; the ``finally`` performs it, on every path. An
        exception nobody expected leaves ``settlement`` unset: the message is requeued
        and the exception goes on up.
        """
        settlement: Settlement | None = None
        try:
            settlement = self.steps.process(delivery, consumer)
            return settlement.result
        finally:
            self.steps.settle(delivery, settlement)

    def handle_batch(
        self, deliveries: Sequence[Delivery], consumer: DispatchConsumer
    ) -> list[str]:
        """Settle each delivery exactly once, as :meth:`handle` does one, with ONE claim
        for the batch and its outcomes written together (``processes/batch.py``); what
        happened to each, in order."""
        return Batch(self.steps, consumer, list(deliveries)).handle()
