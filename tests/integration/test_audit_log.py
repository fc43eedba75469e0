"""A run's audit log read back (``FlowForge.run_history``, ``history``), on both
backends: one read of the event log for the run and all its tasks, never one per task
(a 10,000-task run's log is what `flowforge history` and the UI's time slider read)."""

from __future__ import annotations

from typing import Any

import pytest

from flowforge.app.service import FlowForge
from tests.helpers import task_id, work

CHAIN = {
    "name": "chain",
    "tasks": [
        {"key": "extract", "type": "work"},
        {"key": "load", "type": "work", "depends_on": ["extract"]},
    ],
}


def test_a_runs_audit_log_is_one_read_of_the_event_log_in_time_order(
    app: FlowForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = app.start_workflow_run(CHAIN)
    work(app, run_id, "extract")
    work(app, run_id, "load")

    def one_at_a_time(*_: Any, **__: Any) -> Any:
        raise AssertionError("the audit log read one aggregate's events at a time")

    monkeypatch.setattr(app.events.recorder, "select_events", one_at_a_time)
    history = app.run_history(run_id)

    assert (history[0].aggregate, history[0].transition) == ("WorkflowRun", "create")
    by_task: dict[str | None, list[str]] = {}
    for entry in history:
        by_task.setdefault(entry.task_key, []).append(entry.transition)
    assert by_task == {
        None: ["create", "start", "succeed"],
        "extract": ["create", "claim", "succeed"],
        "load": ["create", "dependencies_satisfied", "claim", "succeed"],
    }
    assert [e.at for e in history] == sorted(e.at for e in history)
    load = app.history(task_id(app, run_id, "load"))
    assert [e.transition for e in load] == ["create", "dependencies_satisfied", "claim", "succeed"]
    assert {e.task_key for e in load} == {"load"}
