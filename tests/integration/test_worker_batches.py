"""A worker's batch (``Worker.handle_batch``, ``flowforge worker --batch N``), on both
backends, with the in-process channel.

A batch is the dispatches already waiting when a worker takes one: they are claimed in
one transaction, their handlers run one after another, and their outcomes are written in
one (``FlowForge.finish_task_runs``); every delivery is settled once, at the end. These
pin what only a batch can get wrong: a bad or stale message among good ones, a task
that waits in its batch past a third of its lease, an outcome kept waiting by a slow
handler, an error nobody expected halfway. The real broker's side, and a worker killed
mid-batch, are in tests/e2e/test_faults.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from flowforge.aggregates.dispatch import DispatchMessage
from flowforge.app.dispatch import message_for
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext
from flowforge.processes.transport import Delivery, InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import Recorder, RoundTrip, forge_event, wait_until, wait_until_expired
from tests.integration.test_worker import ONE, only_task

BATCH = 4
#: Long enough to be renewed by hand; short enough that a waiting task needs it.
SHORT_LEASE_S = 0.6


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder) -> Worker:
    return Worker(
        app, channel.consumer, registry=recorder.registry, worker_id="w-batch", batch=BATCH
    )


@pytest.fixture
def consumer(channel: InMemoryDispatchChannel) -> Iterator[Any]:
    consumer = channel.consumer(prefetch=BATCH)
    yield consumer
    consumer.close()


def runs(app: FlowForge, count: int, definition: dict[str, Any] = ONE) -> list[UUID]:
    return [app.start_workflow_run(definition, {"i": i}) for i in range(count)]


def taken(app: FlowForge, channel: InMemoryDispatchChannel, consumer: Any) -> list[Delivery]:
    """Publish what the outbox holds; every delivery the consumer may hold at once."""
    app.publish_pending_dispatches(channel.publisher())
    deliveries = [consumer.get(0.0) for _ in range(BATCH)]
    assert all(d is not None for d in deliveries), "fewer messages than a batch"
    return deliveries


def test_a_batch_runs_each_task_once_writes_each_outcome_and_acks_each_message(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    run_ids = runs(app, BATCH)
    assert worker.handle_batch(taken(app, channel, consumer), consumer) == ["succeed"] * BATCH
    for run_id in run_ids:
        task = only_task(app, run_id)
        assert (task.state, task.result) == ("succeeded", {"done": "only"})
        history = app.history(task.id)
        assert [e.transition for e in history] == ["create", "claim", "succeed"]
        assert [e.actor for e in history[1:]] == ["w-batch", "w-batch"]  # as itself
        assert app.get_workflow_run(run_id).state == "succeeded"
    assert recorder.calls == {"only": BATCH}
    assert sorted(ctx.inputs["i"] for ctx in recorder.contexts) == list(range(BATCH))
    assert (channel.ready_count, channel.unsettled_count) == (0, 0)


def test_a_batch_on_postgres_claims_in_one_round_trip_and_writes_in_one(
    pg_app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    round_trips: list[RoundTrip],
) -> None:
    worker = Worker(pg_app, channel.consumer, registry=recorder.registry, batch=BATCH)
    consumer = channel.consumer(prefetch=BATCH)
    runs(pg_app, BATCH)
    deliveries = taken(pg_app, channel, consumer)
    round_trips.clear()
    assert worker.handle_batch(deliveries, consumer) == ["succeed"] * BATCH
    assert len(round_trips) == 2, round_trips  # the claims, then the outcomes
    assert all(trip.committed for trip in round_trips)


def message_of(app: FlowForge, run_id: UUID, deployment: str | None = None) -> DispatchMessage:
    (row,) = app.dispatches_of(only_task(app, run_id).id)
    return message_for(row, deployment or app.deployment_id)


def test_a_bad_a_foreign_and_a_duplicate_message_are_settled_beside_good_ones(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    first, second, elsewhere = runs(app, 3)
    channel._append([("work", b"not a dispatch", {})])
    good = message_of(app, first)
    foreign = message_of(app, elsewhere, deployment="another-deployment")
    channel.publisher().publish([good, good, foreign, message_of(app, second)])
    deliveries = [consumer.get(0.0) for _ in range(BATCH)]
    fifth = channel.consumer()  # the batch holds four: the last message waits its turn
    results = worker.handle_batch(deliveries, consumer)
    # The duplicate of a task already in the batch is acked without a second claim.
    assert results == ["dead_lettered", "succeed", "skipped", "dead_lettered"]
    assert channel.dead_letters == [b"not a dispatch", foreign.encode()]
    assert recorder.calls == {"only": 1}
    rest = fifth.get(0.0)
    assert rest is not None and worker.handle(rest, fifth) == "succeed"
    assert [only_task(app, r).state for r in (first, second)] == ["succeeded", "succeeded"]
    assert only_task(app, elsewhere).state == "ready"  # its own deployment's to run
    assert (channel.ready_count, channel.unsettled_count) == (0, 0)


def test_a_stale_redelivery_in_a_batch_is_acked_unrun_beside_the_others(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    """A dispatch whose task another delivery already ran (a redelivery after a lost
    ack): the batch's claim returns no row for it, its row says why, and it is acked."""
    done, waiting = runs(app, 2)
    channel.publisher().publish([message_of(app, done)])
    first = consumer.get(0.0)
    assert first is not None and worker.handle(first, consumer) == "succeed"
    channel.publisher().publish([message_of(app, done), message_of(app, waiting)])
    deliveries = [consumer.get(0.0) for _ in range(2)]
    assert worker.handle_batch(deliveries, consumer) == ["skipped", "succeed"]
    assert recorder.calls == {"only": 2}
    assert [only_task(app, r).state for r in (done, waiting)] == ["succeeded", "succeeded"]
    assert (channel.ready_count, channel.unsettled_count) == (0, 0)


def test_a_task_that_waited_in_its_batch_has_its_lease_renewed_before_it_runs(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    short = {**ONE, "lease_seconds": SHORT_LEASE_S}
    run_ids = runs(app, BATCH, short)

    def slow_first(ctx: TaskContext) -> None:
        if ctx.inputs == {"i": 0}:  # the others wait in the batch meanwhile
            time.sleep(SHORT_LEASE_S / 2)

    recorder.behaviour["only"] = slow_first
    assert worker.handle_batch(taken(app, channel, consumer), consumer) == ["succeed"] * BATCH
    renewals = {
        run_id: [
            e.actor
            for e in app.history(only_task(app, run_id).id)
            if e.transition == "renew_lease"
        ]
        for run_id in run_ids
    }
    # Each task after the slow one waited more than a third of its lease: renewed first
    # (the slow one's own heartbeat renewed it too), by the worker that holds it.
    assert set(run_ids[1:]) <= {run_id for run_id, actors in renewals.items() if actors}
    assert {actor for actors in renewals.values() for actor in actors} == {"w-batch"}


def test_a_task_whose_lease_was_reaped_while_it_waited_is_not_run(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    short = {**ONE, "lease_seconds": SHORT_LEASE_S, "retry": {"max_attempts": 3}}
    run_ids = runs(app, BATCH, short)

    def reap_the_others(ctx: TaskContext) -> None:
        if ctx.inputs == {"i": 0}:
            others = [only_task(app, r).id for r in run_ids[1:]]
            wait_until_expired(app, *others)
            assert sorted(app.reap_expired_leases()) == sorted(others)

    recorder.behaviour["only"] = reap_the_others
    results = worker.handle_batch(taken(app, channel, consumer), consumer)
    assert sorted(results) == ["skipped"] * (BATCH - 1) + ["succeed"]
    assert recorder.calls == {"only": 1}
    for run_id in run_ids[1:]:
        history = [e.transition for e in app.history(only_task(app, run_id).id)]
        assert history[-2:] == ["claim", "reap_lease"]  # then the reaper's retry


def test_an_outcome_is_written_while_a_slow_handler_of_its_batch_still_runs(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    run_ids = runs(app, BATCH)

    def wait_for_the_first(ctx: TaskContext) -> None:
        if ctx.inputs == {"i": 1}:
            first = only_task(app, run_ids[0])
            wait_until(lambda: app.get_task_run(first.id).state == "succeeded", 10, "not written")

    recorder.behaviour["only"] = wait_for_the_first
    assert worker.handle_batch(taken(app, channel, consumer), consumer) == ["succeed"] * BATCH


def test_an_unexpected_error_requeues_the_batch_and_keeps_its_outcomes(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_ids = runs(app, BATCH)

    def broken(*_: Any) -> str:
        raise RuntimeError("a bug after the outcomes' write")

    monkeypatch.setattr(worker.steps, "written", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        worker.handle_batch(taken(app, channel, consumer), consumer)
    assert (channel.ready_count, channel.unsettled_count) == (BATCH, 0)
    monkeypatch.undo()
    # The redeliveries find the kept outcomes: no handler runs twice.
    deliveries = [consumer.get(0.0) for _ in range(BATCH)]
    assert all(d is not None and d.redelivered for d in deliveries)
    worker.handle_batch(deliveries, consumer)
    assert recorder.calls == {"only": BATCH}
    assert [only_task(app, r).state for r in run_ids] == ["succeeded"] * BATCH
    assert (channel.ready_count, channel.unsettled_count) == (0, 0)


def test_a_batch_whose_claim_fails_in_the_database_requeues_every_delivery_and_acks_none(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    consumer: Any,
) -> None:
    """The batch's claim is one transaction: one run that cannot record its start (an
    event is already at its next version) fails the whole claim with a database error.
    Nothing was claimed, so nothing is acked: every delivery goes back on the queue."""
    run_ids = runs(app, BATCH)
    deliveries = taken(app, channel, consumer)
    forge_event(app.store, run_ids[-1], 2)
    assert worker.handle_batch(deliveries, consumer) == ["requeued"] * BATCH
    assert recorder.calls == {}
    assert [only_task(app, run_id).state for run_id in run_ids] == ["ready"] * BATCH
    assert (channel.ready_count, channel.unsettled_count) == (BATCH, 0)
    assert channel.dead_letters == []
