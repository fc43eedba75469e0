"""Rerunning a finished run, on both backends: what is carried over and from where,
what runs again, what handlers see, the audit log, the errors, and the rebuild."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from flowforge import errors
from flowforge.app.results import TaskRunView
from flowforge.app.service import FlowForge
from flowforge.processes.registry import TaskContext
from flowforge.processes.transport import InMemoryDispatchChannel
from flowforge.processes.worker import Worker
from flowforge.projections.writes.tasks import TaskWrites
from tests.helpers import Recorder, run_to_end, states, task_id
from tests.integration.test_contract import DirectDatabase
from tests.integration.test_rebuild import (
    Rows,
    assert_log_agrees_with_rows,
    differences,
    postgres_rows,
    sqlite_rows,
)
from tests.integration.test_scheduler import DIAMOND  # a -> (b, c) -> d, 1 attempt each


@pytest.fixture
def worker(app: FlowForge, channel: InMemoryDispatchChannel, recorder: Recorder) -> Worker:
    return Worker(app, channel.consumer, registry=recorder.registry, worker_id="w-test")


def tasks_by_key(app: FlowForge, run_id: UUID) -> dict[str, TaskRunView]:
    return {t.task_key: t for t in app.task_runs(run_id)}


def result_of(ctx: TaskContext) -> dict[str, Any]:
    """Each handler's result names its task and what it saw upstream."""
    return {"task": ctx.task_key, "run": str(ctx.workflow_run_id), "saw": ctx.upstream}


def fail(ctx: TaskContext) -> Any:
    raise RuntimeError(f"{ctx.task_key} broke")


def failed_diamond(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> UUID:
    """A diamond run whose ``c`` failed: a and b succeeded, d was cancelled."""
    recorder.behaviour = dict.fromkeys("abcd", result_of)
    recorder.behaviour["c"] = fail
    run_id = app.start_workflow_run(DIAMOND, {"day": "2026-01-31"})
    assert run_to_end(app, channel, worker, run_id).state == "failed"
    assert states(app, run_id) == {
        "a": "succeeded",
        "b": "succeeded",
        "c": "failed",
        "d": "cancelled",
    }
    recorder.behaviour["c"] = result_of  # fixed: c succeeds from now on
    recorder.calls.clear()
    return run_id


def test_a_rerun_carries_over_what_succeeded_and_runs_again_what_did_not(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    old = tasks_by_key(app, old_id)

    started = app.rerun_workflow_run(old_id)

    assert started.created
    new_run = app.get_workflow_run(started.run_id)
    assert new_run.rerun_of == old_id
    assert new_run.definition == app.get_workflow_run(old_id).definition
    assert new_run.inputs == {"day": "2026-01-31"}
    assert states(app, started.run_id) == {
        "a": "succeeded",
        "b": "succeeded",
        "c": "ready",  # its one dependency is carried over
        "d": "pending",
    }
    new = tasks_by_key(app, started.run_id)
    for key in "ab":
        assert new[key].id != old[key].id
        assert new[key].result == old[key].result
        assert new[key].carried_from_run_id == old_id
        assert new[key].carried_from_task_run_id == old[key].id
        assert new[key].carried_from_attempt == 1
        assert new[key].started_at is None  # its handler did not run in this run
    for key in "cd":
        assert new[key].carried_from_run_id is None
        assert (new[key].attempt, new[key].fencing_token) == (1, 0)

    assert run_to_end(app, channel, worker, started.run_id).state == "succeeded"
    assert dict(recorder.calls) == {"c": 1, "d": 1}


def test_a_handler_downstream_of_a_carried_over_task_sees_its_result_as_it_would_have(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    old_b = tasks_by_key(app, old_id)["b"]
    started = app.rerun_workflow_run(old_id)
    run_to_end(app, channel, worker, started.run_id)

    d = tasks_by_key(app, started.run_id)["d"]
    new_c = tasks_by_key(app, started.run_id)["c"]
    assert d.result["saw"] == {"b": old_b.result, "c": new_c.result}
    assert old_b.result["run"] == str(old_id)  # b ran in the old run, not here
    assert new_c.result["run"] == str(started.run_id)
    assert new_c.result["saw"] == {"a": tasks_by_key(app, old_id)["a"].result}


def test_the_old_run_is_left_exactly_as_it_was(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    before = (app.get_workflow_run(old_id), app.task_runs(old_id), app.run_history(old_id))
    started = app.rerun_workflow_run(old_id)
    run_to_end(app, channel, worker, started.run_id)
    assert (app.get_workflow_run(old_id), app.task_runs(old_id), app.run_history(old_id)) == (
        before
    )


def test_the_audit_log_links_the_rerun_and_names_where_each_result_came_from(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    old = tasks_by_key(app, old_id)
    started = app.rerun_workflow_run(old_id)

    log = app.run_history(started.run_id)
    (creation,) = [e for e in log if e.aggregate == "WorkflowRun" and e.transition == "create"]
    assert creation.rerun_of == old_id
    carried = {e.task_key or "": e for e in log if e.transition == "carry_over"}
    assert set(carried) == {"a", "b"}
    for key, entry in carried.items():
        assert (entry.source, entry.target) == ("pending", "succeeded")
        assert entry.event == "ResultCarriedOver"
        assert entry.result == old[key].result
        assert entry.carried_from_run_id == old_id
        assert entry.carried_from_task_run_id == old[key].id
        assert entry.carried_from_attempt == old[key].attempt
    # Each carried task: created pending, then carried over, and nothing else.
    a = task_id(app, started.run_id, "a")
    assert [(e.transition, e.target) for e in app.history(a)] == [
        ("create", "pending"),
        ("carry_over", "succeeded"),
    ]


def test_a_rerun_of_a_rerun_names_the_run_that_really_produced_each_result(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    first = failed_diamond(app, channel, worker, recorder)
    second = app.rerun_workflow_run(first).run_id
    run_to_end(app, channel, worker, second)
    recorder.calls.clear()

    third = app.rerun_workflow_run(second, from_tasks=["d"]).run_id

    original, middle = tasks_by_key(app, first), tasks_by_key(app, second)
    new = tasks_by_key(app, third)
    assert app.get_workflow_run(third).rerun_of == second
    for key in "ab":  # carried into the second run from the first: still the first's
        assert new[key].carried_from_run_id == first
        assert new[key].carried_from_task_run_id == original[key].id
        assert new[key].result == original[key].result
    # c ran in the second run.
    assert new["c"].carried_from_run_id == second
    assert new["c"].carried_from_task_run_id == middle["c"].id
    assert new["d"].state == "ready"
    assert run_to_end(app, channel, worker, third).state == "succeeded"
    assert dict(recorder.calls) == {"d": 1}


def test_from_one_side_of_a_diamond_runs_that_side_and_the_join_again(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    recorder.behaviour = dict.fromkeys("abcd", result_of)
    old_id = app.start_workflow_run(DIAMOND)
    assert run_to_end(app, channel, worker, old_id).state == "succeeded"
    recorder.calls.clear()

    started = app.rerun_workflow_run(old_id, from_tasks=["b"])

    assert states(app, started.run_id) == {
        "a": "succeeded",
        "b": "ready",
        "c": "succeeded",
        "d": "pending",
    }
    new = tasks_by_key(app, started.run_id)
    assert {k for k, t in new.items() if t.carried_from_run_id == old_id} == {"a", "c"}
    # Only the ready task was dispatched.
    assert [row.task_key for t in new.values() for row in app.dispatches_of(t.id)] == ["b"]
    assert run_to_end(app, channel, worker, started.run_id).state == "succeeded"
    assert dict(recorder.calls) == {"b": 1, "d": 1}


def test_an_idempotency_key_makes_a_second_rerun_return_the_first(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    first = app.rerun_workflow_run(old_id, idempotency_key="fix-c")
    again = app.rerun_workflow_run(old_id, idempotency_key="fix-c")
    assert first.created
    assert (again.run_id, again.created) == (first.run_id, False)
    assert len(app.recent_runs()) == 2


def test_an_unknown_from_key_is_named_with_the_runs_keys_and_creates_nothing(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    old_id = failed_diamond(app, channel, worker, recorder)
    with pytest.raises(errors.UnknownTaskKeyError, match=r"'e'.*a, b, c, d"):
        app.rerun_workflow_run(old_id, from_tasks=["b", "e"])
    assert len(app.recent_runs()) == 1


def test_a_run_that_has_not_finished_is_refused_with_what_to_do(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    with pytest.raises(errors.RunNotFinishedError, match=r"pending.*cancel"):
        app.rerun_workflow_run(run_id)
    assert len(app.recent_runs()) == 1


def test_a_run_whose_every_task_succeeded_has_nothing_to_rerun_without_from(
    app: FlowForge, channel: InMemoryDispatchChannel, worker: Worker, recorder: Recorder
) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    assert run_to_end(app, channel, worker, run_id).state == "succeeded"
    with pytest.raises(errors.NothingToRerunError, match="--from"):
        app.rerun_workflow_run(run_id)
    assert len(app.recent_runs()) == 1


def test_a_cancelled_run_reruns_every_task(app: FlowForge) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    assert app.cancel_workflow_run(run_id)
    started = app.rerun_workflow_run(run_id)
    assert states(app, started.run_id) == {
        "a": "ready",
        "b": "pending",
        "c": "pending",
        "d": "pending",
    }


def test_an_unknown_run_is_an_unknown_run(app: FlowForge) -> None:
    with pytest.raises(errors.UnknownRunError):
        app.rerun_workflow_run(UUID(int=7))


def test_the_generic_transition_refuses_the_carry_over_edge_and_writes_nothing(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    b = task_id(app, run_id, "b")  # pending: the edge's source state
    with pytest.raises(errors.RerunOnlyTransitionError):
        app.transition_task_run(b, "carry_over")
    assert [e.transition for e in app.history(b)] == ["create"]


def as_uuid(value: Any) -> UUID | None:
    """A UUID column as either backend stores it (SQLite: text)."""
    return None if value is None else UUID(str(value))


def raw_rows(app: FlowForge, request: pytest.FixtureRequest) -> Rows:
    """Every projected row, read with plain SQL beside the app (test_rebuild.py's)."""
    if app.database.dialect == "postgres":
        return postgres_rows(request.getfixturevalue("postgres_url"))
    return sqlite_rows(request.getfixturevalue("sqlite_url"))


def test_the_rebuild_reproduces_the_rerun_link_and_the_carried_over_rows(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    request: pytest.FixtureRequest,
) -> None:
    first = failed_diamond(app, channel, worker, recorder)
    second = app.rerun_workflow_run(first).run_id
    run_to_end(app, channel, worker, second)
    third = app.rerun_workflow_run(second, from_tasks=["c"]).run_id  # left unfinished

    before = raw_rows(app, request)
    app.rebuild_projections()
    after = raw_rows(app, request)

    assert differences(before, after) == []
    assert before == after
    # Not vacuous: the rows the rebuild had to reproduce are there.
    links = {as_uuid(r["id"]): as_uuid(r["rerun_of"]) for r in after["workflow_runs"]}
    assert {run: of for run, of in links.items() if of} == {second: first, third: second}
    carried = [r for r in after["task_runs"] if r["carried_from_run_id"] is not None]
    assert len(carried) == 2 + 2  # a, b into the second run; a, b into the third
    assert_log_agrees_with_rows(app)


def test_a_rerun_that_fails_midway_writes_nothing_at_all(
    app: FlowForge,
    channel: InMemoryDispatchChannel,
    worker: Worker,
    recorder: Recorder,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The whole new run is one transaction: a crash after its run, its tasks and two
    # carry-overs were written leaves no row, no dispatch and no event of it.
    old_id = failed_diamond(app, channel, worker, recorder)
    url = request.getfixturevalue(
        "postgres_url" if app.database.dialect == "postgres" else "sqlite_url"
    )
    direct = DirectDatabase(app.database.dialect, url)
    before, events = raw_rows(app, request), direct.count_events()
    carried: list[object] = []
    carry_over = TaskWrites.carry_over

    def carry_over_then_crash(self: TaskWrites, event: Any) -> None:
        carry_over(self, event)
        carried.append(event)
        if len(carried) == 2:
            raise RuntimeError("crash after the second carry-over")

    monkeypatch.setattr(TaskWrites, "carry_over", carry_over_then_crash)
    with pytest.raises(RuntimeError, match="second carry-over"):
        app.rerun_workflow_run(old_id)

    assert len(carried) == 2
    assert raw_rows(app, request) == before
    assert direct.count_events() == events


def test_from_tasks_as_a_bare_string_is_refused_rather_than_read_as_letters(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(DIAMOND)
    assert app.cancel_workflow_run(run_id)
    with pytest.raises(TypeError, match=r"\('bc',\)"):
        app.rerun_workflow_run(run_id, from_tasks="bc")
    assert len(app.recent_runs()) == 1
