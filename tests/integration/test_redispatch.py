"""The scheduler's redispatch net (``Outbox.redispatch_lost``, app/redispatch.py): a
new dispatch only for a task whose dispatch its queue lost, never for one waiting
behind others or for a worker; the reason recorded, counted and told by ``why``. On
both backends; against the in-process channel standing in for the broker, and against
RabbitMQ (a purged queue)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from uuid import UUID

import psycopg
import pytest

from flowforge import observe
from flowforge.aggregates.dispatch import decode_dispatch
from flowforge.app import why as explain_task
from flowforge.app.ports import QueueProbe, QueueState
from flowforge.app.scope import Scope
from flowforge.app.service import FlowForge
from flowforge.config import BrokerConfig
from flowforge.processes import rabbitmq
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.projections.statements import load
from tests import topology

TYPE = "t"


def wide(n: int, name: str = "wide") -> dict[str, object]:
    return {"name": name, "tasks": [{"key": f"k{i:03}", "type": TYPE} for i in range(n)]}


def ready_ids(app: FlowForge, run_id: UUID) -> list[UUID]:
    return [task.id for task in sorted(app.task_runs(run_id), key=lambda t: t.task_key)]


def channel_probe(channel: InMemoryDispatchChannel) -> QueueProbe:
    def probe(task_type: str) -> QueueState:
        messages = channel.ready_count_of(task_type)
        return QueueState(queue=task_type, exists=True, messages=messages, consumers=0)

    return probe


def fixed_probe(messages: int | None) -> QueueProbe:
    def probe(task_type: str) -> QueueState | None:
        if messages is None:
            return None
        return QueueState(queue=task_type, exists=True, messages=messages, consumers=0)

    return probe


def passes(app: FlowForge, probe: QueueProbe, n: int, scope: Scope | None = None) -> list[UUID]:
    """``n`` passes of the net with a period of 0 (every published dispatch stalled)."""
    redispatched: list[UUID] = []
    for _ in range(n):
        redispatched += app.redispatch_lost(0, probe, scope=scope)
    return redispatched


class Recorder(observe.Observer):
    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []

    def tasks_redispatched(self, reason: str, count: int) -> None:
        self.told.append((reason, count))


def test_a_backlog_waiting_in_its_queue_is_never_redispatched(app: FlowForge) -> None:
    channel = InMemoryDispatchChannel()
    run_id = app.start_workflow_run(wide(40))
    app.publish_pending_dispatches(channel.publisher())
    probe = channel_probe(channel)
    assert passes(app, probe, 5) == []
    # Workers drain the head of the queue: still nothing is lost, nothing redispatched.
    consumer = channel.consumer(task_types=[TYPE])
    for _ in range(15):
        delivery = consumer.get(1.0)
        assert delivery is not None
        app.claim_task_run(decode_dispatch(delivery.body).task_run_id, "w", 30)
        delivery.ack()
    assert passes(app, probe, 5) == []
    assert all(len(app.dispatches_of(task)) == 1 for task in ready_ids(app, run_id))


def test_a_type_with_no_worker_waits_with_one_dispatch_however_many_passes(
    app: FlowForge,
) -> None:
    channel = InMemoryDispatchChannel()
    run_id = app.start_workflow_run(wide(5))
    app.publish_pending_dispatches(channel.publisher())
    assert passes(app, channel_probe(channel), 20) == []
    assert [len(app.dispatches_of(task)) for task in ready_ids(app, run_id)] == [1] * 5


def test_a_purged_queue_s_dispatches_are_replaced_once_with_their_reason(app: FlowForge) -> None:
    run_id = app.start_workflow_run(wide(6))
    app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    tasks = ready_ids(app, run_id)
    empty = channel_probe(InMemoryDispatchChannel())  # the queue they were in is gone
    recorder = Recorder()
    with observe.installed(recorder):
        assert app.redispatch_lost(0, empty) == []  # the first pass suspects
        assert sorted(app.redispatch_lost(0, empty)) == sorted(tasks)  # the second replaces
        assert app.redispatch_lost(0, empty) == []  # each has a pending dispatch now
    assert recorder.told == [("queue_short", 6)]
    for task in tasks:
        first, second = app.dispatches_of(task)
        assert (first.reason, second.reason) == (None, "queue_short")
        assert second.published_at is None
    answer = explain_task.why(app, tasks[0])
    assert answer.reason == "dispatch_pending"
    assert "dispatch 2 of this task, redispatched because its queue held fewer" in (
        answer.headline
    )
    # Published again, the queue holds them: never again.
    channel = InMemoryDispatchChannel()
    app.publish_pending_dispatches(channel.publisher())
    assert passes(app, channel_probe(channel), 4) == []


def test_only_the_shortfall_s_oldest_stalled_tasks_are_redispatched(app: FlowForge) -> None:
    run_id = app.start_workflow_run(wide(5))
    app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    oldest = sorted(app.task_runs(run_id), key=lambda t: (t.updated_at, t.id))
    three_held = fixed_probe(3)
    assert passes(app, three_held, 2) == [task.id for task in oldest[:2]]


def test_a_dispatch_published_within_the_period_or_a_silent_broker_is_left_alone(
    app: FlowForge,
) -> None:
    app.start_workflow_run(wide(3))
    app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    for _ in range(3):
        assert app.redispatch_lost(3600, fixed_probe(0)) == []  # not stalled yet
    assert passes(app, fixed_probe(None), 3) == []  # the broker could not be asked


def test_a_scoped_net_redispatches_only_its_own_runs(app: FlowForge) -> None:
    mine, theirs = app.start_workflow_run(wide(2)), app.start_workflow_run(wide(2, "theirs"))
    app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    scope = Scope.of_runs([mine])
    assert sorted(passes(app, fixed_probe(0), 2, scope=scope)) == sorted(ready_ids(app, mine))
    assert all(len(app.dispatches_of(task)) == 1 for task in ready_ids(app, theirs))


def test_the_scheduler_s_pass_runs_the_net_only_with_a_probe(app: FlowForge) -> None:
    run_id = app.start_workflow_run(wide(2))
    app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    for _ in range(3):
        assert app.schedule_once(redispatch_after=0).redispatched == 0
    summaries = [app.schedule_once(redispatch_after=0, probe=fixed_probe(0)) for _ in range(2)]
    assert [s.redispatched for s in summaries] == [0, 2]
    assert all(len(app.dispatches_of(task)) == 2 for task in ready_ids(app, run_id))


# --- two schedulers -----------------------------------------------------------------------


@pytest.fixture(params=["postgres", "sqlite"])
def two_schedulers(request: pytest.FixtureRequest) -> Iterator[tuple[FlowForge, FlowForge]]:
    """Two services on one database, as two schedulers' processes are."""
    first: FlowForge = request.getfixturevalue(
        f"{'pg' if request.param == 'postgres' else 'sqlite'}_app"
    )
    url = request.getfixturevalue("postgres_url" if request.param == "postgres" else "sqlite_url")
    second = FlowForge(url)
    yield first, second
    second.close()


def test_two_schedulers_racing_their_passes_replace_each_lost_dispatch_once(
    two_schedulers: tuple[FlowForge, FlowForge],
) -> None:
    first, second = two_schedulers
    run_id = first.start_workflow_run(wide(30))
    first.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    gone = fixed_probe(0)  # the queue lost all 30
    assert first.redispatch_lost(0, gone) == second.redispatch_lost(0, gone) == []  # suspects
    barrier = threading.Barrier(2)
    replaced: dict[int, list[UUID]] = {}

    def confirm(n: int, app: FlowForge) -> None:
        barrier.wait()
        replaced[n] = app.redispatch_lost(0, gone)

    threads = [threading.Thread(target=confirm, args=(n, a)) for n, a in enumerate(two_schedulers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(replaced[0] + replaced[1]) == sorted(ready_ids(first, run_id))
    assert all(len(first.dispatches_of(task)) == 2 for task in ready_ids(first, run_id))


def test_a_pass_while_another_scheduler_s_pass_holds_the_net_replaces_nothing(
    pg_app: FlowForge, postgres_url: str
) -> None:
    run_id = pg_app.start_workflow_run(wide(3))
    pg_app.publish_pending_dispatches(InMemoryDispatchChannel().publisher())
    gone = fixed_probe(0)
    assert pg_app.redispatch_lost(0, gone) == []  # suspected, to be confirmed next pass
    with psycopg.connect(postgres_url) as other_pass:  # a transaction until the block ends
        assert other_pass.execute(load("postgres")["try_redispatch_net"]).fetchone() == (True,)
        assert pg_app.redispatch_lost(0, gone) == []
    # The other pass ended (replacing nothing): the net's suspicion starts again.
    assert pg_app.redispatch_lost(0, gone) == []
    assert sorted(pg_app.redispatch_lost(0, gone)) == sorted(ready_ids(pg_app, run_id))


# --- against RabbitMQ -----------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[BrokerConfig]:
    with topology.own_topology("redispatch") as config:
        yield config


def test_a_purged_rabbitmq_queue_s_dispatches_are_replaced_and_a_full_one_s_are_not(
    app: FlowForge, broker: BrokerConfig
) -> None:
    run_id = app.start_workflow_run(wide(8))
    publisher = rabbitmq.RabbitDispatchPublisher(broker)
    try:
        app.publish_pending_dispatches(publisher)

        def probe(task_type: str) -> QueueState:
            return rabbitmq.queue_state(broker, task_type)

        assert probe(TYPE).messages == 8
        assert passes(app, probe, 3) == []  # all 8 wait in their queue
        connection = rabbitmq.connect(broker, name="flowforge-test-admin")
        try:
            connection.channel().queue_purge(broker.queue_for(TYPE))
        finally:
            connection.close()
        assert sorted(passes(app, probe, 2)) == sorted(ready_ids(app, run_id))
        assert app.publish_pending_dispatches(publisher) == 8
        assert probe(TYPE).messages == 8
        assert passes(app, probe, 3) == []
    finally:
        publisher.close()
