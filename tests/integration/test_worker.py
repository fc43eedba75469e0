"""The worker's handling of one message, on both backends, with the in-process channel.

The channel has the broker's semantics (prefetch 1, ack/requeue/dead-letter); the real
RabbitMQ path is covered by tests/e2e/test_faults.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from contextlib import closing
from typing import Any
from uuid import UUID

import psycopg
import pytest

from flowforge.aggregates import failures
from flowforge.app.dispatch import message_for
from flowforge.app.service import FlowForge
from flowforge.processes import steps
from flowforge.processes.registry import TaskContext
from flowforge.processes.transport import Delivery, InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from tests.helpers import Recorder, handle_next, one_task, wait_until

ONE = one_task(retry={"max_attempts": 1})
PAIR = {
    "name": "pair",
    "tasks": [
        {"key": "up", "type": "work"},
        {"key": "down", "type": "work", "depends_on": ["up"]},
    ],
}


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder) -> Worker:
    return Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-test")


def deliver_one(app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker) -> str:
    """Publish what the outbox holds, then let the worker handle exactly one message."""
    app.publish_pending_dispatches(channel.publisher())
    return handle_next(channel, worker)


def only_task(app: FlowForge, run_id: UUID, key: str = "only") -> Any:
    return next(t for t in app.task_runs(run_id) if t.task_key == key)


def test_a_dispatch_is_claimed_run_finished_and_then_acked(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    run_id = app.start_workflow_run(ONE, {"greeting": "hi"})
    assert deliver_one(app, channel, worker) == "succeed"
    task = only_task(app, run_id)
    assert task.state == "succeeded"
    assert task.result == {"done": "only"}
    assert recorder.calls == {"only": 1}
    assert channel.ready_count == 0
    assert channel.unsettled_count == 0
    ctx = recorder.contexts[0]
    assert ctx.inputs == {"greeting": "hi"}
    assert (ctx.attempt, ctx.fencing_token, ctx.worker_id) == (1, 1, "w-test")
    history = app.history(task.id)
    assert [e.transition for e in history] == ["create", "claim", "succeed"]
    assert [e.actor for e in history[1:]] == ["w-test", "w-test"]  # claimed as itself


def test_handlers_run_off_the_consumer_thread_on_one_thread_reused_task_after_task(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    # A thread started per task made each task wait for it to be scheduled
    # (docs/performance.md, "Design choices that buy the speed").
    threads: list[int] = []
    recorder.behaviour["only"] = lambda ctx: threads.append(threading.get_ident())
    for _ in range(3):
        app.start_workflow_run(ONE)
        assert deliver_one(app, channel, worker) == "succeed"
    assert len(threads) == 3 and len(set(threads)) == 1
    assert threads[0] != threading.get_ident()  # the test's thread consumes here


def test_a_handler_that_returns_within_a_pump_interval_never_wakes_the_heartbeat_lane(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    recorder: Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its first renewal would be due lease/3 later; handing it over and taking it back
    # cost two thread wake-ups per task (docs/performance.md, "Design choices that buy the
    # speed"). A worker id of its own: a lane's thread outlives its worker, so another
    # test's worker "w-test" may have left a heartbeat lane by that name. A pump interval
    # of a second, not 50 ms: on a loaded machine a no-op handler's thread alone can take
    # longer than 50 ms to be scheduled, and then the hand-over would be right.
    monkeypatch.setattr(steps, "PUMP_INTERVAL_S", 1.0)
    worker_id = f"w-{uuid.uuid4().hex[:8]}"
    worker = Worker(app, channel.consumer, registry=recorder.registry, worker_id=worker_id)
    recorder.behaviour["only"] = lambda ctx: None
    for _ in range(3):
        app.start_workflow_run(ONE)
        assert deliver_one(app, channel, worker) == "succeed"
    names = [thread.name for thread in threading.enumerate()]
    assert f"handler-{worker_id}" in names  # the handler lane did run them
    assert f"heartbeat-{worker_id}" not in names


def forget_task_leases(request: pytest.FixtureRequest) -> None:
    """Task rows as a FlowForge before schema version 5 left them: no lease of their own."""
    statement = "UPDATE task_runs SET lease_seconds = NULL"
    if request.node.callspec.params["app"] == "postgres":
        with psycopg.connect(request.getfixturevalue("postgres_url"), autocommit=True) as pg:
            pg.execute(statement)
    else:
        path = request.getfixturevalue("sqlite_url").removeprefix("sqlite:///")
        with closing(sqlite3.connect(path)) as lite, lite:
            lite.execute(statement)


@pytest.mark.parametrize("row_has_lease", [True, False], ids=["own-lease", "older-row"])
def test_the_claim_takes_the_definitions_lease_with_or_without_one_on_the_row(
    request: pytest.FixtureRequest,
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    row_has_lease: bool,
) -> None:
    leased = {"name": "leased", "tasks": [{"key": "only", "type": "work", "lease_seconds": 600}]}
    run_id = app.start_workflow_run(leased)
    if not row_has_lease:
        forget_task_leases(request)
    remaining: list[float] = []

    def lease_left(ctx: TaskContext) -> None:
        expires = app.get_task_run(ctx.task_run_id).lease_expires_at
        assert expires is not None
        remaining.append((expires - app.database_now()).total_seconds())

    recorder.behaviour["only"] = lease_left
    assert deliver_one(app, channel, worker) == "succeed"
    (left,) = remaining
    assert 500 < left <= 600  # the definition's 600 s, not the default 30 s
    assert only_task(app, run_id).state == "succeeded"


def test_a_handler_that_outlives_a_renewal_interval_has_its_lease_renewed(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    lease = 1.5  # a renewal every 0.5 s
    long = {"name": "long", "tasks": [{"key": "only", "type": "work", "lease_seconds": lease}]}
    run_id = app.start_workflow_run(long)

    def until_renewed(ctx: TaskContext) -> None:
        wait_until(
            lambda: "renew_lease" in [e.transition for e in app.history(ctx.task_run_id)],
            10 * lease,
            "the lease was never renewed",
        )

    recorder.behaviour["only"] = until_renewed
    assert deliver_one(app, channel, worker) == "succeed"
    transitions = [e.transition for e in app.history(only_task(app, run_id).id)]
    assert transitions[:3] == ["create", "claim", "renew_lease"]
    assert transitions[-1] == "succeed"


@pytest.mark.parametrize("second", ["the same worker", "a worker new to the run"])
def test_a_duplicate_dispatch_is_acked_without_running_the_handler_again(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    second: str,
) -> None:
    run_id = app.start_workflow_run(ONE)
    row = app.dispatches_of(only_task(app, run_id).id)[0]
    duplicate = message_for(row, app.deployment_id)
    channel.publisher().publish([duplicate, duplicate])
    consumer = channel.consumer()
    # A new worker has not cached the run: the skip reads it with the task's row.
    other = Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-other")
    outcomes = []
    for handler in (worker, worker if second == "the same worker" else other):
        delivery = consumer.get(0.1)
        assert delivery is not None
        outcomes.append(handler.handle(delivery, consumer))
    assert outcomes == ["succeed", "skipped"]
    assert recorder.calls == {"only": 1}
    assert channel.ready_count == 0
    assert channel.unsettled_count == 0


def test_the_handler_context_carries_upstream_results_and_a_stable_idempotency_key(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    recorder.behaviour["up"] = {"value": 41}
    run_id = app.start_workflow_run(PAIR)
    deliver_one(app, channel, worker)
    app.advance_workflow_run(run_id)
    deliver_one(app, channel, worker)
    down = recorder.contexts[-1]
    assert down.task_key == "down"
    assert down.upstream == {"up": {"value": 41}}
    assert down.idempotency_key == f"flowforge:{down.task_run_id}"


def test_a_handler_exception_fails_the_task_with_type_message_and_traceback(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    def explode(ctx: TaskContext) -> None:
        raise ValueError("bad input row 7")

    recorder.behaviour["only"] = explode
    run_id = app.start_workflow_run(ONE)
    assert deliver_one(app, channel, worker) == "fail"
    task = only_task(app, run_id)
    assert task.state == "failed"
    assert task.error["type"] == "ValueError"
    assert task.error["message"] == "bad input row 7"
    assert "explode" in task.error["traceback"]
    assert channel.unsettled_count == 0


def test_a_result_that_is_not_json_fails_the_task_with_a_clear_error(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    recorder.behaviour["only"] = lambda ctx: {"when": threading.Lock()}
    run_id = app.start_workflow_run(ONE)
    assert deliver_one(app, channel, worker) == "fail"
    error = only_task(app, run_id).error
    assert error["type"] == "TypeError"
    # The cause and where it is come first: the line status and why show is cut at 120.
    summary = failures.summary(error)
    assert summary.startswith("TypeError: result cannot be stored at result['when']: 'lock'")
    assert "is not JSON" in summary


def test_an_unknown_task_type_fails_the_task_without_loading_anything(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    definition = {
        "name": "odd",
        "retry": {"max_attempts": 1},
        "tasks": [{"key": "only", "type": "os_system"}],
    }
    run_id = app.start_workflow_run(definition)
    assert deliver_one(app, channel, worker) == "fail"
    error = only_task(app, run_id).error
    assert error["type"] == "UnknownTaskTypeError"
    assert "'os_system'" in error["message"]
    assert "registered: work" in error["message"]
    assert recorder.calls == {}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json at all", "JSON"),
        (json.dumps({"schema_version": 1}).encode(), "dispatch_id"),
        (json.dumps({"schema_version": 99, "dispatch_id": "x"}).encode(), "99"),
    ],
)
def test_a_malformed_message_is_dead_lettered_and_the_worker_keeps_consuming(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    body: bytes,
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_id = app.start_workflow_run(ONE)
    channel._append([("work", body, {})])  # a poison message ahead of the real one
    app.publish_pending_dispatches(channel.publisher())
    consumer = channel.consumer()
    outcomes = []
    while (delivery := consumer.get(0.1)) is not None:
        outcomes.append(worker.handle(delivery, consumer))
    assert outcomes == ["dead_lettered", "succeed"]
    assert channel.dead_letters == [body]
    assert only_task(app, run_id).state == "succeeded"
    assert any(reason in r.getMessage() + str(getattr(r, "reason", "")) for r in caplog.records)


def test_a_stopped_worker_finishes_its_in_flight_message_then_exits(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(ctx: TaskContext) -> str:
        started.set()
        release.wait(10)
        return "finished"

    recorder.behaviour["only"] = slow
    run_id = app.start_workflow_run(ONE)
    app.publish_pending_dispatches(channel.publisher())
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(10)
    worker.stop.set("test")  # as SIGTERM would, while the handler runs
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert only_task(app, run_id).result == "finished"
    assert channel.unsettled_count == 0
    assert channel.ready_count == 0


class SettleSpy:
    """A Delivery that, when settled, reads the task's row through the service: what a
    crash right after the settle would leave behind."""

    def __init__(self, delivery: Delivery, app: FlowForge, task_run_id: UUID) -> None:
        self._delivery = delivery
        self._app = app
        self._task_run_id = task_run_id
        self.seen: list[tuple[str, str, int]] = []
        self.body = delivery.body
        self.redelivered = delivery.redelivered
        self.headers = delivery.headers

    def _record(self, outcome: str) -> None:
        row = self._app.get_task_run(self._task_run_id)
        self.seen.append((outcome, row.state, len(self._app.history(self._task_run_id))))

    def ack(self) -> None:
        self._record("ack")
        self._delivery.ack()

    def requeue(self) -> None:
        self._record("requeue")
        self._delivery.requeue()

    def dead_letter(self) -> None:
        self._record("dead_letter")
        self._delivery.dead_letter()


@pytest.mark.parametrize(("behaviour", "state"), [(None, "succeeded"), ("raise", "failed")])
def test_the_ack_comes_only_after_the_outcome_is_committed(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    behaviour: str | None,
    state: str,
) -> None:
    if behaviour == "raise":
        recorder.behaviour["only"] = lambda ctx: 1 / 0
    run_id = app.start_workflow_run(ONE)
    app.publish_pending_dispatches(channel.publisher())
    consumer = channel.consumer()
    delivery = consumer.get(1.0)
    assert delivery is not None
    spy = SettleSpy(delivery, app, only_task(app, run_id).id)
    try:
        worker.handle(spy, consumer)
    finally:
        consumer.close()
    # Acked once, and by then the claim AND the outcome were committed (create, claim,
    # outcome): an ack any earlier could lose a task whose worker then crashed.
    assert spy.seen == [("ack", state, 3)]
    assert channel.ready_count == channel.unsettled_count == 0


def test_the_handler_context_names_its_task_run_run_and_type(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    run_id = app.start_workflow_run(ONE)
    deliver_one(app, channel, worker)
    (ctx,) = recorder.contexts
    task = only_task(app, run_id)
    assert (ctx.task_run_id, ctx.workflow_run_id) == (task.id, run_id)
    assert (ctx.task_key, ctx.task_type) == ("only", "work")


def test_a_dispatch_for_a_task_run_that_does_not_exist_is_dead_lettered(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    app.start_workflow_run(ONE)
    (row,) = [r for t in app.ready_task_runs() for r in app.dispatches_of(t.id)]
    orphan = message_for(row, app.deployment_id).model_copy(update={"task_run_id": uuid.uuid4()})
    channel.publisher().publish([orphan])
    consumer = channel.consumer()
    delivery = consumer.get(1.0)
    assert delivery is not None
    try:
        assert worker.handle(delivery, consumer) == "dead_lettered"
    finally:
        consumer.close()
    assert channel.dead_letters == [orphan.encode()]
    assert recorder.calls == {}


class PumpCounter:
    """The channel's consumer, telling when the worker has serviced it a few times."""

    def __init__(self, channel: InMemoryDispatchChannel, enough: int) -> None:
        self._consumer = channel.consumer()
        self._enough = enough
        self.pumps = 0
        self.serviced = threading.Event()

    def get(self, timeout: float) -> Delivery | None:
        return self._consumer.get(timeout)

    def pump(self, seconds: float) -> None:
        self.pumps += 1
        if self.pumps >= self._enough:
            self.serviced.set()
        self._consumer.pump(seconds)

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        self._consumer.ack_all(deliveries)

    def close(self) -> None:
        self._consumer.close()


def test_the_worker_services_its_connection_while_a_long_handler_runs(
    app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder
) -> None:
    # An unserviced broker connection is closed by the broker (missed heartbeats) and
    # its message redelivered while the handler still runs.
    consumer = PumpCounter(channel, enough=3)
    recorder.behaviour["only"] = lambda ctx: "done" if consumer.serviced.wait(10) else "starved"
    worker = Worker(app, lambda: consumer, registry=recorder.registry, worker_id="w-test")
    run_id = app.start_workflow_run(ONE)
    app.publish_pending_dispatches(channel.publisher())
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert consumer.serviced.wait(10), "the worker never serviced its connection"
    finally:
        worker.stop.set("test")  # the in-flight message is finished first
        thread.join(10)
    assert not thread.is_alive()
    assert only_task(app, run_id).result == "done"
