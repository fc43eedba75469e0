"""Helpers the test modules share, written once: a one-task workflow, a run's task
states, claiming and working a task, waiting on the database's clock, holding a run's
row, forging an event in the log and reading the log raw, polling for something
asynchronous, handing a worker one message, and driving ``rabbitmqctl``.

Waits poll until the thing happens and stop at once; the deadline only ends a broken
test. None of them widens a race window.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from prometheus_client import REGISTRY

from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE
from flowforge.app.results import Claim, WorkflowRunView
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext, TaskRegistry
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from flowforge.projections.store import Store

T = TypeVar("T")


@dataclass
class RoundTrip:
    """One round trip to PostgreSQL (the ``round_trips`` fixture): its statements'
    texts joined by ``;`` (BEGIN and COMMIT included where sent), and whether it ended
    with no transaction open and no error: a write's round trip that committed (a
    transaction sent whole commits at its pipeline's Sync, with no COMMIT of its own)."""

    text: bytes
    committed: bool = False


#: The topic of an event :func:`forge_event` stores: no FlowForge event has it.
FORGED_TOPIC = "tests:Forged"
#: The topic of a task run's creation event.
TASK_CREATED_TOPIC = "flowforge.aggregates.task_run:TaskRun.Created"

#: A lease nobody expects to expire during a test.
LEASE_S = 30.0
#: How long the database's clock may take to pass a tiny lease's expiry.
CLOCK_DEADLINE_S = 5.0
POLL_S = 0.01
#: ``rabbitmqctl stop_app`` / ``start_app`` can take a while on a loaded machine.
RABBITMQCTL_TIMEOUT_S = 180


def one_task(key: str = "only", task_type: str = "work", **fields: Any) -> dict[str, Any]:
    """The workflow ``one``: a single task, ``key`` of ``task_type``; ``fields`` add to
    the definition (``retry=...``, ``lease_seconds=...``)."""
    return {"name": "one", **fields, "tasks": [{"key": key, "type": task_type}]}


def task_id(app: FlowForge, run_id: UUID, key: str) -> UUID:
    return next(t.id for t in app.task_runs(run_id) if t.task_key == key)


def states(app: FlowForge, run_id: UUID) -> dict[str, str]:
    """Each task's state by key."""
    return {t.task_key: t.state for t in app.task_runs(run_id)}


def work(app: FlowForge, run_id: UUID, key: str, outcome: str = "succeed") -> None:
    """Claim and finish one task as a worker would (``outcome``: ``succeed`` or ``fail``)."""
    claim = app.claim_task_run(task_id(app, run_id, key), "test-worker", LEASE_S)
    assert claim is not None, f"{key} was not claimable: {states(app, run_id)}"
    error = {"type": "Boom", "message": f"{key} failed"} if outcome == "fail" else None
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, outcome, error=error)


def claim(app: FlowForge, task_run_id: UUID, worker: str, lease_s: float = LEASE_S) -> Claim:
    """Claim a task nobody else is claiming; fail the test if the claim is lost."""
    won = app.claim_task_run(task_run_id, worker, lease_s)
    assert won is not None, f"{worker} lost a claim nobody else was making"
    return won


def succeed_leaving_a_mark(app: FlowForge, task_run_id: UUID, fencing_token: int) -> None:
    """Succeed a claimed task with only a mark for its run, as a finish leaves a run
    whose row another transaction held: the finish's own advance not taken."""
    with app.store.write() as writes:
        succeed = TASK_RUN_MACHINE.get("succeed")
        assert writes.tasks.finish(task_run_id, succeed, fencing_token, actor="test-worker")


def marks(app: FlowForge) -> int:
    """How many run wake-up marks wait for a scheduler."""
    with app.store.read() as reads:
        return reads.wakeup_count()


def run_edges(app: FlowForge, run_id: UUID) -> list[tuple[str, str]]:
    """The run's own transitions (not its tasks') and who took them."""
    return [(e.transition, e.actor) for e in app.run_history(run_id) if e.aggregate_id == run_id]


def forge_event(store: Store, originator_id: UUID, version: int) -> None:
    """An event at ``version`` of ``originator_id`` in the event log's table, committed,
    as another writer or a tool could leave it: a bare row (topic :data:`FORGED_TOPIC`),
    nothing else changed. A transition that would record its event at that version must
    then fail whole: the events' primary key is the second guard."""
    params = {"originator_id": originator_id, "originator_version": version}
    with store.write() as writes:
        writes.recording.tx.defer(
            "insert_stored_event", {**params, "topic": FORGED_TOPIC, "state": b"{}"}
        )


def logged(store: Store, originator_id: UUID) -> list[tuple[int, str]]:
    """The (version, topic) of every event of ``originator_id`` in the log, raw: read
    without decoding them (a forged one does not decode)."""
    with store.write() as writes:
        stored = writes.rebuild.stored_events()
    found = [(s.originator_version, s.topic) for s in stored if s.originator_id == originator_id]
    return sorted(found)


@contextmanager
def run_row_held(app: FlowForge, run_id: UUID) -> Iterator[None]:
    """Another transaction holds the run's row meanwhile (PostgreSQL), as a scheduler's
    advance or a cancel does: a claim made now cannot start the run, which stays
    pending until a finish or a scheduler starts it."""
    with app.store.write() as holder:
        assert holder.runs.lock(run_id) is not None
        yield


def wait_until_expired(app: FlowForge, *task_run_ids: UUID) -> None:
    """Poll until the database's clock says every one of these leases has expired."""
    deadline = time.monotonic() + CLOCK_DEADLINE_S
    while not set(task_run_ids) <= set(app.expired_leases()):
        assert time.monotonic() < deadline, f"leases of {task_run_ids} never expired"
        time.sleep(POLL_S)


def wait_until(probe: Callable[[], T | None], timeout: float, message: str) -> T:
    """``probe()``'s first truthy result, polled until ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {message}")
        time.sleep(0.05)


def rabbitmqctl(*args: str) -> str:
    """Run ``rabbitmqctl`` against the shared broker; its stdout. Raises if it fails."""
    completed = subprocess.run(
        ["rabbitmqctl", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=RABBITMQCTL_TIMEOUT_S,
    )
    return completed.stdout


def handle_next(channel: InMemoryDispatchChannel, worker: Worker) -> str:
    """Let ``worker`` handle exactly the next message on ``channel``; what happened."""
    consumer = channel.consumer()
    delivery = consumer.get(1.0)
    assert delivery is not None, "no message on the channel"
    try:
        return worker.handle(delivery, consumer)
    finally:
        consumer.close()


def run_to_end(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    run_id: UUID,
    *,
    max_steps: int = 60,
) -> WorkflowRunView:
    """Publish, handle and advance, one step at a time, until the run has ended (within
    ``max_steps`` steps, else an ``AssertionError`` with the tasks' states)."""
    for _ in range(max_steps):
        run = app.get_workflow_run(run_id)
        if WORKFLOW_RUN_MACHINE.is_terminal(run.run_state):
            return run
        app.publish_pending_dispatches(channel.publisher())
        if channel.ready_count:
            handle_next(channel, worker)
        else:
            app.advance_workflow_run(run_id)
    raise AssertionError(f"run {run_id} did not end: {states(app, run_id)}")


def stop_all(processes: Mapping[str, subprocess.Popen[bytes]], timeout: float) -> dict[str, int]:
    """SIGTERM every process at once, then each one's exit code by name."""
    for process in processes.values():
        process.send_signal(signal.SIGTERM)
    return {name: process.wait(timeout=timeout) for name, process in processes.items()}


class Recorder:
    """Handlers that count their calls, outside the engine."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.contexts: list[TaskContext] = []
        self.registry = TaskRegistry()
        self.behaviour: dict[str, Any] = {}
        self.registry.task("work")(self.work)

    def work(self, ctx: TaskContext) -> Any:
        self.calls[ctx.task_key] += 1
        self.contexts.append(ctx)
        behaviour = self.behaviour.get(ctx.task_key)
        if callable(behaviour):
            return behaviour(ctx)
        return behaviour if behaviour is not None else {"done": ctx.task_key}


#: How long a racer may wait at the barrier or a test for its racers, before it fails.
RACE_TIMEOUT_S = 30.0


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call on its own thread, all released at once; their results, in order.

    An exception in any racer is raised here (all of them, as an ExceptionGroup).
    """
    barrier = threading.Barrier(len(calls), timeout=RACE_TIMEOUT_S)
    results: list[Any] = [None] * len(calls)
    failures: list[Exception] = []

    def racer(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:
            failures.append(exc)
            barrier.abort()

    threads = [
        threading.Thread(target=racer, args=(i, call), name=f"racer-{i}")
        for i, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a racer never finished"
    if failures:
        raise ExceptionGroup("a racing thread raised", failures)
    return results


def prometheus_samples(name: str) -> Iterator[tuple[dict[str, str], float]]:
    """Each sample called ``name`` in this process's Prometheus registry, with its labels."""
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == name:
                yield sample.labels, sample.value
