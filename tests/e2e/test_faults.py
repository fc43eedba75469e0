"""Surviving real faults: real OS processes, a real broker, real crashes.

Each test runs a workflow through separate scheduler, publisher and worker processes on
PostgreSQL and RabbitMQ, then checks the audit log and a side-effect log kept outside
the engine (tests/e2e/fault_tasks.py). See docs/worker.md for what each one proves.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from uuid import UUID

import pika
import pytest

from flowforge.app.dispatch import message_for
from flowforge.app.service import FlowForge
from flowforge.processes.rabbitmq import RabbitDispatchPublisher
from tests.e2e.cluster import Cluster, admin
from tests.helpers import rabbitmqctl, wait_until

LEASE_S = 2
#: Dispatches a batching worker takes at once.
BATCH = 5


#: The lease of the task whose outcome write meets a database outage: longer than the
#: outage can last here (30 s to see the failed write, then the retry's backoff).
OUTAGE_LEASE_S = 120


def single(task_type: str, **extra: object) -> dict[str, object]:
    return {
        "name": f"single_{task_type}",
        "lease_seconds": LEASE_S,
        "retry": {"max_attempts": 3, "backoff_seconds": 0.1},
        "tasks": [{"key": "victim", "type": task_type}],
        **extra,
    }


def transitions(app: FlowForge, task_run_id: UUID) -> list[str]:
    return [e.transition for e in app.history(task_run_id) if e.transition != "renew_lease"]


def only_task_id(app: FlowForge, run_id: UUID) -> UUID:
    (task,) = app.task_runs(run_id)
    return task.id


def first_start(cluster: Cluster) -> dict[str, object]:
    return wait_until(
        lambda: next((e for e in cluster.effects() if e["event"] == "started"), None),
        30,
        "the handler never started",
    )


def test_a_worker_killed_mid_handler_is_reaped_and_another_worker_completes_the_task(
    cluster: Cluster,
) -> None:
    cluster.start_all(workers=2)
    run_id = cluster.submit(single("held"))
    victim = first_start(cluster)
    os.kill(int(victim["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert cluster.wait_for_run(run_id).state == "succeeded"
    log = transitions(cluster.app, only_task_id(cluster.app, run_id))
    assert log.count("succeed") == 1
    assert log == ["create", "claim", "reap_lease", "claim", "succeed"]
    claims = [
        e
        for e in cluster.app.history(only_task_id(cluster.app, run_id))
        if e.transition == "claim"
    ]
    assert [c.fencing_token for c in claims] == [1, 3]  # the reap bumped it to 2
    assert claims[0].actor != claims[1].actor
    ran = [e for e in cluster.effects() if e["event"] == "ran"]
    assert [(e["fencing_token"], e["pid"] != victim["pid"]) for e in ran] == [(3, True)]


def test_a_worker_stopped_with_a_hung_handler_exits_within_its_grace_and_loses_nothing(
    cluster: Cluster,
) -> None:
    """SIGTERM with a handler that would run 60 s more: the worker waits its --grace (1 s),
    then exits without acking, saying so; the task's lease expires, it is reaped, and
    another worker runs it."""
    cluster.start("scheduler", "scheduler", "--interval", "0.2")
    cluster.start("publisher", "publisher", "--interval", "0.1")
    stuck = cluster.start(
        "worker-1",
        "worker",
        "--tasks",
        "tests.e2e.fault_tasks",
        "--worker-id",
        "worker-1",
        "--grace",
        "1",
    )
    run_id = cluster.submit(single("held"))
    first_start(cluster)
    stuck.send_signal(signal.SIGTERM)
    assert stuck.wait(timeout=20) == 0, cluster.log_tails()
    assert "stop grace ran out" in (cluster.logs / "worker-1.log").read_text()
    cluster.start_worker("worker-2")
    assert cluster.wait_for_run(run_id).state == "succeeded"
    log = transitions(cluster.app, only_task_id(cluster.app, run_id))
    assert log == ["create", "claim", "reap_lease", "claim", "succeed"]
    ran = [e for e in cluster.effects() if e["event"] == "ran"]
    assert [e["worker_id"] for e in ran] == ["worker-2"]


def test_a_hung_handler_that_times_out_or_is_cancelled_does_not_hold_its_worker(
    cluster: Cluster,
) -> None:
    """One worker, two handlers that hang (60 s): the first attempt times out (1 s), the
    second run is cancelled. Each time the worker finds its lease lost, abandons the
    handler and takes the next task: a third run, of a quick task, succeeds on it."""
    cluster.start("scheduler", "scheduler", "--interval", "0.2")
    cluster.start("publisher", "publisher", "--interval", "0.1")
    cluster.start_worker("worker-1")
    hung = single("held", retry={"max_attempts": 1})
    timed_out = cluster.submit(
        {**hung, "tasks": [{"key": "victim", "type": "held", "timeout_seconds": 1}]}
    )
    assert cluster.wait_for_run(timed_out).state == "failed"
    (error,) = [
        e.error
        for e in cluster.app.history(only_task_id(cluster.app, timed_out))
        if e.transition == "fail"
    ]
    assert error is not None and error["type"] == "TimedOut"

    cancelled = cluster.submit(hung)
    wait_until(
        lambda: len([e for e in cluster.effects() if e["event"] == "started"]) == 2,
        30,
        "the second hung handler never started",
    )
    assert cluster.app.cancel_workflow_run(cancelled)
    after = cluster.submit(single("quick"))

    assert cluster.wait_for_run(after).state == "succeeded"
    ran = [e for e in cluster.effects() if e["event"] == "ran"]
    assert [(e["task_key"], e["worker_id"]) for e in ran] == [("victim", "worker-1")]
    log = (cluster.logs / "worker-1.log").read_text()
    assert log.count("handler abandoned") == 2, cluster.log_tails()


def test_a_batching_worker_killed_mid_batch_loses_none_of_it_and_runs_none_twice(
    cluster: Cluster,
) -> None:
    """Every task of the killed worker's batch was claimed in one transaction: each is
    reaped and completed once by the other worker; no handler's effect is lost."""
    definition = {
        "name": "batch_held",
        "lease_seconds": LEASE_S,
        "retry": {"max_attempts": 3, "backoff_seconds": 0.1},
        "tasks": [{"key": f"t{i}", "type": "held"} for i in range(BATCH)],
    }
    cluster.start_all(workers=0)
    run_id = cluster.submit(definition)
    wait_until(lambda: cluster.app.pending_dispatch_count() == 0, 30, "not published")
    victim = cluster.start_worker("worker-1", BATCH)  # every dispatch is waiting for it
    first_start(cluster)
    os.kill(victim.pid, signal.SIGKILL)
    cluster.release()  # later first attempts (the other worker's) finish at once
    cluster.start_worker("worker-2", BATCH)
    assert cluster.wait_for_run(run_id).state == "succeeded"
    batched = 0
    for task in cluster.app.task_runs(run_id):
        log = transitions(cluster.app, task.id)
        claims = [e.actor for e in cluster.app.history(task.id) if e.transition == "claim"]
        if claims[0] == "worker-1":
            batched += 1
            assert log == ["create", "claim", "reap_lease", "claim", "succeed"]
        else:
            assert log == ["create", "claim", "succeed"]
    assert batched >= 2, "the killed worker held no batch"
    ran = Counter(e["task_key"] for e in cluster.effects() if e["event"] == "ran")
    assert ran == {f"t{i}": 1 for i in range(BATCH)}
    assert all(e["pid"] != victim.pid for e in cluster.effects() if e["event"] == "ran")


def test_a_stopped_worker_that_wakes_after_losing_its_lease_writes_nothing(
    cluster: Cluster,
) -> None:
    cluster.start_all(workers=2)
    run_id = cluster.submit(single("held"))
    victim = first_start(cluster)
    pid = int(victim["pid"])  # type: ignore[call-overload]
    os.kill(pid, signal.SIGSTOP)
    try:
        # The lease expires, the reaper reclaims, the other worker finishes attempt 2.
        assert cluster.wait_for_run(run_id).state == "succeeded"
    finally:
        cluster.release()  # the stale handler will now finish...
        os.kill(pid, signal.SIGCONT)
    wait_until(
        lambda: [e for e in cluster.effects() if e["event"] == "ran" and e["pid"] == pid],
        30,
        "the stopped worker never woke up",
    )
    task_id = only_task_id(cluster.app, run_id)
    task = cluster.app.get_task_run(task_id)
    assert task.result["token"] == 3
    assert task.result["pid"] != pid
    assert transitions(cluster.app, task_id).count("succeed") == 1
    assert (cluster.logs / "worker-1.log").exists()


@pytest.mark.serial
@pytest.mark.parametrize("batch", [1, BATCH])
def test_a_broker_restart_mid_run_loses_no_task_and_finishes_none_twice(
    cluster: Cluster, batch: int
) -> None:
    definition = {
        "name": "wide_steady",
        "lease_seconds": 5,
        "retry": {"max_attempts": 5, "backoff_seconds": 0.1},
        "tasks": [{"key": f"t{i}", "type": "steady"} for i in range(12)],
    }
    cluster.start_all(workers=2, batch=batch)
    run_id = cluster.submit(definition)
    wait_until(lambda: len(cluster.effects()) >= 2, 30, "no task started")
    try:
        rabbitmqctl("stop_app")
        wait_until(lambda: cluster.processes["publisher"].poll() is None, 5, "publisher died")
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")
    assert cluster.wait_for_run(run_id, timeout=120).state == "succeeded"
    for task in cluster.app.task_runs(run_id):
        assert transitions(cluster.app, task.id).count("succeed") == 1
    alive = {name: p.poll() for name, p in cluster.processes.items()}
    assert set(alive.values()) == {None}, f"a process exited during the restart: {alive}"


def test_a_dropped_database_connection_during_the_outcome_write_is_retried_and_runs_once(
    cluster: Cluster,
) -> None:
    cluster.start_all(workers=1)
    # The guarantee is for an outage shorter than the lease: one that outlasts it is
    # the reaper's to recover (a re-run, by design). This outage lasts until the worker
    # has logged a failed write, which a loaded machine can stretch past LEASE_S.
    run_id = cluster.submit(single("held", lease_seconds=OUTAGE_LEASE_S))
    first_start(cluster)
    # The task can start before the scheduler is up (it is dispatched at creation): a
    # scheduler whose start-up meets the outage exits, which is not what is tested here.
    wait_until(lambda: "scheduler started" in _log(cluster, "scheduler"), 30, "no scheduler")
    with admin() as conn:
        conn.execute(f'ALTER DATABASE "{cluster.dbname}" ALLOW_CONNECTIONS false')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (cluster.dbname,),
        )
        cluster.release()  # the handler returns; its outcome write cannot reach the db
        wait_until(
            lambda: "outcome write failed; retrying" in _log(cluster, "worker-1"),
            30,
            "the worker never retried the outcome write",
        )
        conn.execute(f'ALTER DATABASE "{cluster.dbname}" ALLOW_CONNECTIONS true')
    app = FlowForge(cluster.database_url)  # the test's own pool was terminated too
    try:
        try:
            state = wait_until(lambda: _terminal_state(app, run_id), 60, "")
        except AssertionError:
            tasks = [(t.state, t.fencing_token) for t in app.task_runs(run_id)]
            pytest.fail(f"run stuck: tasks {tasks}\n{cluster.log_tails(25)}")
        assert state == "succeeded"
        # The worker kept the outcome and wrote it once the database was back: no
        # reap, no second claim, and the handler ran exactly once.
        assert transitions(app, only_task_id(app, run_id)) == ["create", "claim", "succeed"]
        assert [e["event"] for e in cluster.effects()] == ["started", "ran"]
    finally:
        app.close()


def _log(cluster: Cluster, name: str) -> str:
    return (cluster.logs / f"{name}.log").read_text(errors="replace")


def _terminal_state(app: FlowForge, run_id: UUID) -> str | None:
    state = app.get_workflow_run(run_id).state
    return state if state in ("succeeded", "failed", "cancelled") else None


def test_duplicate_dispatch_messages_run_the_handler_once(cluster: Cluster) -> None:
    run_id = cluster.submit(single("quick"))
    task_id = only_task_id(cluster.app, run_id)
    (row,) = cluster.app.dispatches_of(task_id)
    publisher = RabbitDispatchPublisher(cluster.broker)
    try:
        publisher.publish(
            [message_for(row, cluster.app.deployment_id)] * 3
        )  # three copies before any worker runs
    finally:
        publisher.close()
    cluster.start_all(workers=2)
    assert cluster.wait_for_run(run_id).state == "succeeded"
    assert Counter(e["task_key"] for e in cluster.effects() if e["event"] == "ran") == {
        "victim": 1
    }
    assert transitions(cluster.app, task_id) == ["create", "claim", "succeed"]


def test_a_poison_message_is_dead_lettered_and_the_run_is_unaffected(cluster: Cluster) -> None:
    cluster.start_all(workers=1)
    # A first run makes the processes declare the topology the poison needs.
    assert cluster.wait_for_run(cluster.submit(single("quick"))).state == "succeeded"
    connection = pika.BlockingConnection(pika.URLParameters(cluster.broker.url))
    try:
        channel = connection.channel()
        # Onto the queue of the type the worker runs, as a dispatch of it would go.
        quick = cluster.broker.queue_for("quick")
        channel.basic_publish(cluster.broker.exchange, quick, b"\x00poison")
    finally:
        connection.close()
    run_id = cluster.submit(single("quick"))
    assert cluster.wait_for_run(run_id).state == "succeeded"
    wait_until(
        lambda: "malformed dispatch dead-lettered" in _log(cluster, "worker-1"),
        30,
        "the poison was never dead-lettered",
    )
    assert cluster.processes["worker-1"].poll() is None
    assert _dead_letters(cluster) == [b"\x00poison"]


def _dead_letters(cluster: Cluster) -> list[bytes]:
    connection = pika.BlockingConnection(pika.URLParameters(cluster.broker.url))
    bodies: list[bytes] = []
    try:
        channel = connection.channel()
        while True:
            method, _, body = channel.basic_get(cluster.broker.dead_letter_queue, auto_ack=True)
            if method is None:
                return bodies
            assert isinstance(body, bytes)
            bodies.append(body)
    finally:
        connection.close()


def _log_says(cluster: Cluster, name: str, text: str) -> Callable[[], bool]:
    return lambda: text in _log(cluster, name)


def test_processes_stop_cleanly_on_sigterm(cluster: Cluster) -> None:
    cluster.start_all(workers=1)
    for name in ("scheduler", "publisher", "worker-1"):
        started = f"{name.split('-')[0]} started"
        wait_until(_log_says(cluster, name, started), 30, f"{name} not up")
    assert set(cluster.stop_all().values()) == {0}
