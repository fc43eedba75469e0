"""A worker's batch (``flowforge worker --batch N``): the dispatches already waiting,
claimed in one transaction and their outcomes written together (docs/worker.md,
'Batches').

Each delivery is settled exactly once, as the worker settles one alone: the batch takes
the worker's own steps (``flowforge.processes.steps``: admit, execute, write, settle) in
a batch's order. The handlers
run one after another. A task that waited in the batch for a third of its lease has it
renewed before its handler starts. An outcome waits for the batch's others at most
:data:`OUTCOME_BATCH_WAIT_S`, written meanwhile if a handler runs longer. Every
settlement is performed at the end, after every outcome was written: a broker lost
meanwhile costs no outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

from flowforge import errors, observe
from flowforge.aggregates.dispatch import DispatchMessage
from flowforge.app.results import TaskRunView
from flowforge.processes import settle
from flowforge.processes.outcome import Outcome
from flowforge.processes.settle import Settlement
from flowforge.processes.steps import Steps
from flowforge.processes.transport import Delivery, DispatchConsumer

#: How long a handler's outcome waits for its batch's others before it is written.
OUTCOME_BATCH_WAIT_S = 0.05
#: A task that waited in its batch this share of its lease has it renewed first (the
#: heartbeat's own period).
RENEW_WAITED_FRACTION = 1 / 3


@dataclass(slots=True)
class Batch:
    """The deliveries a worker took at once: each one's settlement once decided, and
    the outcomes that wait to be written together (by the delivery's position)."""

    steps: Steps
    consumer: DispatchConsumer
    deliveries: list[Delivery]
    settlements: list[Settlement | None] = field(default_factory=list)
    pending: list[tuple[int, Outcome]] = field(default_factory=list)
    #: When the oldest waiting outcome was produced (``time.monotonic()``).
    pending_since: float = 0.0
    #: What watches the attempts whose outcomes are not written yet (by position).
    spans: dict[int, observe.AttemptWatch] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.settlements = [None] * len(self.deliveries)

    def handle(self) -> list[str]:
        """Settle every delivery; what happened to each, in order. If an error nobody
        expected escapes, the outcomes not written yet are kept for their redeliveries
        and every delivery not settled yet is requeued."""
        try:
            self._run()
            self._flush()
        except BaseException as exc:
            for _, outcome in self.pending:
                self.steps.outcomes.keep(outcome)
            for span in self.spans.values():
                span.unwritten(exc)
            self._settle(quietly=True)  # the error going up matters more
            raise
        self._settle()
        return [settlement.result for settlement in self.settlements if settlement is not None]

    def _run(self) -> None:
        steps = self.steps
        to_claim: dict[int, DispatchMessage] = {}
        for i, delivery in enumerate(self.deliveries):
            admitted = steps.admit(delivery)
            if isinstance(admitted, Settlement):
                self.settlements[i] = admitted
            elif steps.outcomes.kept(admitted.task_run_id) is not None:
                self.settlements[i] = steps.process(delivery, self.consumer)
            elif any(m.task_run_id == admitted.task_run_id for m in to_claim.values()):
                # A duplicate dispatch: the claim of the first decides for both.
                self.settlements[i] = settle.ack(steps.claimer.duplicate(admitted))
            else:
                to_claim[i] = admitted
        if not to_claim:
            return
        messages = list(to_claim.values())
        began = time.time_ns()
        rows = steps.guarded(messages[0], lambda: steps.claimer.claim_all(messages))
        if isinstance(rows, Settlement):  # the database failed: nothing was claimed
            for i in to_claim:
                self.settlements[i] = rows
            return
        claimed_at = time.monotonic()
        for (i, message), row in zip(to_claim.items(), rows, strict=True):
            step = partial(self._run_claimed, i, message, row, claimed_at, began)
            self.settlements[i] = steps.guarded(message, step)
            self._flush_if_due()

    def _run_claimed(
        self,
        index: int,
        message: DispatchMessage,
        row: TaskRunView | None,
        claimed_at: float,
        began: int,
    ) -> Settlement | None:
        """Run one task of the batch; ``None``: its outcome waits to be written.
        ``claimed_at``: when the batch was claimed (``time.monotonic()``); ``began``:
        when its claim began (``time.time_ns()``: its attempts' spans start there)."""
        steps = self.steps
        claimed = steps.claimer.claimed(message.task_run_id, row)
        if isinstance(claimed, str):
            return settle.ack(claimed)
        task, claim, lease_seconds = claimed
        waited = time.monotonic() - claimed_at >= lease_seconds * RENEW_WAITED_FRACTION
        if waited and not steps.app.renew_lease(
            task.id, claim.fencing_token, lease_seconds, actor=steps.worker_id
        ):
            return settle.ack(steps.claimer.skipped(task, "lease lost while waiting in its batch"))
        headers = self.deliveries[index].headers
        span = steps.attempt_started(task, claim, lease_seconds, headers, began)
        try:
            outcome = steps.execute(
                task, claim, lease_seconds, self.consumer, self._flush_if_due, watch=span
            )
        except BaseException as exc:
            span.unwritten(exc)
            raise
        self.spans[index] = span
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append((index, outcome))
        return None

    def _flush_if_due(self) -> None:
        if self.pending and time.monotonic() - self.pending_since >= OUTCOME_BATCH_WAIT_S:
            self._flush()

    def _flush(self) -> None:
        """Write the outcomes waiting in the batch, together."""
        if not self.pending:
            return
        steps = self.steps
        outcomes = [outcome for _, outcome in self.pending]
        written = steps.outcomes.write_all(outcomes, partial(steps.service, self.consumer))
        for (i, outcome), result in zip(self.pending, written, strict=True):
            span = self.spans.pop(i)
            if isinstance(result, errors.PersistenceError):
                failed = settle.for_error(result)
                self.settlements[i] = steps.unsettled(failed, result, outcome.task_run_id)
                span.unwritten(result)
            else:
                self.settlements[i] = settle.ack(
                    span.end(steps.written(outcome, result), outcome.error)
                )
        self.pending.clear()

    def _settle(self, *, quietly: bool = False) -> None:
        """Perform every settlement, the acks together (``ack_all``) after the others;
        requeue what has none. A broker error is raised once every delivery was tried
        (the broker requeues what could not be settled), unless ``quietly``."""
        lost: errors.BrokerError | None = None
        acks: list[Delivery] = []
        for delivery, settlement in zip(self.deliveries, self.settlements, strict=True):
            if settlement is not None and settlement.action == "ack":
                acks.append(delivery)
                continue
            try:
                self.steps.settle(delivery, settlement, back_off=False)
            except errors.BrokerError as exc:
                lost = lost or exc
        try:
            self.consumer.ack_all(acks)
        except errors.BrokerError as exc:
            lost = lost or exc
        if lost is not None and not quietly:
            raise lost
        if any(s is not None and s.back_off for s in self.settlements):
            self.steps.back_off()
