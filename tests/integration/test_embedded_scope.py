"""An embedded runner runs its own run: two runs of different workflows that share
handlers in one database, and a ProcessGroup (and each of its loops: scheduler, reaper,
publisher, start-up redispatch) scoped to one of them leaves the other exactly as it
was; the `--all` scope runs both. On both backends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from flowforge.aggregates.dispatch import DispatchHeaders, DispatchMessage
from flowforge.app.scope import Scope
from flowforge.app.service import FlowForge
from flowforge.bootstrap import ProcessGroup, Transport
from flowforge.processes.outbox_publisher import Publisher
from flowforge.processes.registry import TaskContext, TaskRegistry
from tests.helpers import claim, task_id, wait_until_expired

#: The handlers both workflows use.
REGISTRY = TaskRegistry()


@REGISTRY.task("fetch")
def fetch(ctx: TaskContext) -> dict[str, Any]:
    return {"rows": [1, 2, 3]}


@REGISTRY.task("store")
def store(ctx: TaskContext) -> int:
    return len(ctx.upstream[next(iter(ctx.upstream))]["rows"])


#: An older run's workflow, waiting in the database when the runner starts.
OLDER = {
    "name": "older",
    "tasks": [
        {"key": "fetch", "type": "fetch"},
        {"key": "store", "type": "store", "depends_on": ["fetch"]},
    ],
}
#: The runner's own workflow: another name and other keys, the same task types.
MINE = {
    "name": "mine",
    "tasks": [
        {"key": "get", "type": "fetch"},
        {"key": "put", "type": "store", "depends_on": ["get"]},
    ],
}


@dataclass
class Untouched:
    """A run as it stood: its rows' versions, its audit log and its outbox rows."""

    run_version: int
    task_versions: dict[str, int]
    events: int
    dispatches: list[tuple[UUID, object]] = field(default_factory=list)

    @classmethod
    def of(cls, app: FlowForge, run_id: UUID) -> Untouched:
        tasks = app.task_runs(run_id)
        return cls(
            run_version=app.get_workflow_run(run_id).version,
            task_versions={t.task_key: t.version for t in tasks},
            events=len(app.run_history(run_id)),
            dispatches=[
                (d.dispatch_id, d.published_at) for t in tasks for d in app.dispatches_of(t.id)
            ],
        )


@dataclass
class Recording:
    """A publisher that keeps what it was given (a real DispatchPublisher, no broker)."""

    published: list[DispatchMessage] = field(default_factory=list)

    def publish(
        self, messages: Sequence[DispatchMessage], headers: DispatchHeaders | None = None
    ) -> None:
        self.published.extend(messages)

    def close(self) -> None:
        """Nothing to release."""


def test_a_group_scoped_to_its_run_finishes_it_and_leaves_an_older_run_untouched(
    app: FlowForge,
) -> None:
    older = app.start_workflow_run(OLDER)
    mine = app.start_workflow_run(MINE)
    before = Untouched.of(app, older)
    assert before.run_version == 1 and set(before.task_versions.values()) == {1}
    with ProcessGroup(app, Transport.in_memory(), registry=REGISTRY, runs=[mine]) as group:
        assert group.wait_for(mine, timeout=30).state == "succeeded"
    # Checked once every thread of the group has stopped: nothing can come later.
    assert Untouched.of(app, older) == before
    assert app.get_workflow_run(older).state == "pending"
    assert [e.transition for e in app.run_history(older)] == ["create"] * 3


def test_the_all_scope_finishes_every_run_it_has_the_handlers_for(app: FlowForge) -> None:
    older = app.start_workflow_run(OLDER)
    mine = app.start_workflow_run(MINE)
    with ProcessGroup(app, Transport.in_memory(), registry=REGISTRY) as group:
        assert group.wait_for(mine, timeout=30).state == "succeeded"
        assert group.wait_for(older, timeout=30).state == "succeeded"
    assert app.get_task_run(task_id(app, older, "store")).result == 3


def test_a_scoped_publisher_never_publishes_another_runs_pending_dispatch(
    app: FlowForge,
) -> None:
    older = app.start_workflow_run(OLDER)
    mine = app.start_workflow_run(MINE)
    (waiting,) = app.dispatches_of(task_id(app, older, "fetch"))
    sent = Recording()
    publisher = Publisher(app, lambda: sent, scope=Scope.of_runs([mine]))
    assert publisher.drain() == 1
    assert [m.task_key for m in sent.published] == ["get"]
    (still,) = app.dispatches_of(task_id(app, older, "fetch"))
    assert still.dispatch_id == waiting.dispatch_id and still.published_at is None
    # Unscoped, the same row goes out: the scope is what held it back.
    assert Publisher(app, lambda: sent).drain() == 1
    assert app.dispatches_of(task_id(app, older, "fetch"))[0].published_at is not None


def test_a_scoped_reaper_leaves_another_runs_expired_lease_alone(app: FlowForge) -> None:
    older = app.start_workflow_run(OLDER)
    mine = app.start_workflow_run(MINE)
    theirs = claim(app, task_id(app, older, "fetch"), "their-worker", 0.05)
    ours = claim(app, task_id(app, mine, "get"), "our-worker", 0.05)
    wait_until_expired(app, theirs.task_run_id, ours.task_run_id)
    summary = app.schedule_once(scope=Scope.of_runs([mine], REGISTRY))
    assert summary.reaped == 1
    assert app.get_task_run(ours.task_run_id).state == "ready"
    left = app.get_task_run(theirs.task_run_id)
    assert (left.state, left.fencing_token, left.lease_owner) == ("running", 1, "their-worker")
    # Their own runner (scoped to their run) reaps it.
    assert app.reap_expired_leases(scope=Scope.of_runs([older])) == [theirs.task_run_id]


def test_a_scoped_redispatch_adds_no_outbox_row_to_another_run(app: FlowForge) -> None:
    older = app.start_workflow_run(OLDER)
    mine = app.start_workflow_run(MINE)
    # Both first dispatches delivered, then lost (an in-process channel that exited).
    assert Publisher(app, Recording).drain() == 2
    theirs = task_id(app, older, "fetch")
    assert app.redispatch_stalled(0, scope=Scope.of_runs([mine])) == [task_id(app, mine, "get")]
    assert len(app.dispatches_of(theirs)) == 1
    assert app.redispatch_stalled(0) == [theirs]  # unscoped, theirs is stalled too
