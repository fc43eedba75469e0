"""Metrics counted by the application service, on both backends (docs/observability.md):
``flowforge_transitions_total`` agrees, machine by machine and edge by edge, with what
the audit log recorded, across every path that writes (a claim that starts its run, a
worker's batch of successes that finishes runs in SQL, a failure and its retry, a reap,
a cancel, a rerun's carried-over results), and a rolled-back transaction counts nothing."""

from __future__ import annotations

from collections import Counter
from uuid import UUID

import pytest

from flowforge import errors, metrics
from flowforge.app.commands import Finish
from flowforge.app.service import FlowForge
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.projections.writes.tasks import TaskWrites
from tests.helpers import prometheus_samples, task_id, wait_until_expired, work

CHAIN = {
    "name": "chain",
    "retry": {"max_attempts": 2, "backoff_seconds": 0},
    "tasks": [
        {"key": "extract", "type": "work"},
        {"key": "load", "type": "work", "depends_on": ["extract"]},
    ],
}
ONE = {"name": "one", "tasks": [{"key": "a", "type": "work"}]}
MACHINES = {"TaskRun": "task_run", "WorkflowRun": "workflow_run"}


@pytest.fixture(autouse=True)
def counting() -> None:
    """Count, as a process started with --metrics-port does."""
    metrics.enable()


def counted() -> Counter[tuple[str, str]]:
    """The transitions counter's value for every (machine, edge), now."""
    samples = prometheus_samples("flowforge_transitions_total")
    return Counter({(labels["machine"], labels["edge"]): int(v) for labels, v in samples})


def logged(app: FlowForge, runs: list[UUID]) -> Counter[tuple[str, str]]:
    """What the audit log recorded for these runs, by (machine, edge)."""
    return Counter(
        (MACHINES[e.aggregate], e.transition) for run in runs for e in app.run_history(run)
    )


def test_the_transitions_counted_are_the_transitions_the_audit_log_recorded(
    app: FlowForge,
) -> None:
    before = counted()
    chain = app.start_workflow_run(CHAIN)
    work(app, chain, "extract")
    work(app, chain, "load", outcome="fail")
    app.schedule_once()  # the retry
    app.schedule_once()
    claim = app.claim_task_run(task_id(app, chain, "load"), "w1", 0.001)
    assert claim is not None
    wait_until_expired(app, claim.task_run_id)
    assert app.reap_expired_leases() == [claim.task_run_id]
    work(app, chain, "load")

    leaves = [app.start_workflow_run(ONE) for _ in range(3)]
    claims, runs = app.claim_task_runs_and_their_runs([task_id(app, r, "a") for r in leaves], "w2")
    for run in runs:
        app.definitions.of(run)  # as a worker does: the successes go in one batch
    finishes = [Finish(c.id, c.fencing_token, "succeed", {"n": 1}) for c in claims if c]
    assert app.finish_task_runs(finishes) == [True] * 3

    cancelled = app.start_workflow_run(CHAIN)
    assert app.claim_task_run(task_id(app, cancelled, "extract"), "w3") is not None
    assert app.cancel_workflow_run(cancelled)
    failed = app.start_workflow_run({**CHAIN, "retry": {"max_attempts": 1}})
    work(app, failed, "extract")
    work(app, failed, "load", outcome="fail")
    app.schedule_once()
    rerun = app.rerun_workflow_run(failed).run_id

    runs_ = [chain, *leaves, cancelled, failed, rerun]
    assert counted() - before == logged(app, runs_)
    assert (counted() - before)[("workflow_run", "succeed")] == 4  # the chain and 3 leaves


def test_a_transaction_that_rolls_back_counts_nothing(
    app: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = app.start_workflow_run(CHAIN)
    assert app.claim_task_run(task_id(app, run_id, "extract"), "w1") is not None
    before = counted()

    def fails(*_: object, **__: object) -> None:
        raise errors.TransactionConflictError("injected: the database failed here")

    monkeypatch.setattr(TaskWrites, "lock_unfinished_of_run", fails)
    with pytest.raises(errors.TransactionConflictError):
        app.cancel_workflow_run(run_id)  # its own edge written, then the failure
    assert counted() == before


def dispatches_counted() -> Counter[str]:
    samples = prometheus_samples("flowforge_dispatches_total")
    return Counter({labels["outcome"]: int(value) for labels, value in samples})


def test_the_in_process_transport_counts_its_dispatches_published_and_confirmed(
    app: FlowForge,
) -> None:
    channel = InMemoryDispatchChannel()
    for _ in range(3):
        app.start_workflow_run(ONE)
    before = dispatches_counted()
    assert app.publish_pending_dispatches(channel.publisher()) == 3
    assert dispatches_counted() - before == Counter({"published": 3, "confirmed": 3})
    assert channel.ready_count == 3
