"""A task the scheduler cancels because another task failed for good records why, in
its cancel event and its row (``aggregates/cancel_cause.py``), and ``status`` and
``history`` name it: ``cancelled (upstream_failed: b1)`` under finish_branches,
``cancelled (run failed when b1 failed)`` under fail-fast. A user's cancel records no
cause. ``db rebuild``'s verifier finds the rows as their logs say. Both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from flowforge.aggregates.cancel_cause import CancelCause, cause_of
from flowforge.app.service import FlowForge
from flowforge.cli import db, render
from tests.helpers import claim, task_id, work
from tests.integration.test_finish_branches import (
    FAIL_FAST,
    FINISH_BRANCHES,
    b1_fails_while_a1_runs,
)


def cause(app: FlowForge, run_id: UUID, key: str) -> tuple[CancelCause | None, str, str]:
    """``key``'s cause as its row and as its cancel event say, and its state cell."""
    task = app.get_task_run(task_id(app, run_id, key))
    (cancel,) = [e for e in app.history(task.id) if e.transition.startswith("cancel")]
    assert cause_of(cancel.error) == cause_of(task.error)
    return cause_of(task.error), render.state_cell(task), cancel.transition


def history_notes(app: FlowForge, run_id: UUID, key: str) -> list[str]:
    lines = render.history_lines(app.history(task_id(app, run_id, key)))
    return [line.strip() for line in lines if line.startswith(render.HISTORY_NOTE_INDENT)]


def test_under_finish_branches_each_dependant_records_the_failed_task_upstream(
    app: FlowForge,
) -> None:
    run_id, _ = b1_fails_while_a1_runs(app, FINISH_BRANCHES)
    for key, edge in (("b2", "cancel_pending"), ("b3", "cancel_pending")):
        assert cause(app, run_id, key) == (
            CancelCause("upstream_failed", "b1"),
            "cancelled (upstream_failed: b1)",
            edge,
        )
        assert "cancelled (upstream_failed: b1)" in history_notes(app, run_id, key)
    assert db.verify(app)[1] == []


def test_under_fail_fast_every_leftover_records_that_the_run_failed_with_the_task(
    app: FlowForge,
) -> None:
    run_id, _ = b1_fails_while_a1_runs(app, FAIL_FAST)
    assert app.get_workflow_run(run_id).state == "failed"
    expected = (CancelCause("run_failed", "b1"), "cancelled (run failed when b1 failed)")
    # a1 was running (its lease cancelled), a2 and b2 pending.
    for key, edge in (
        ("a1", "cancel_running"),
        ("a2", "cancel_pending"),
        ("b2", "cancel_pending"),
    ):
        assert cause(app, run_id, key) == (*expected, edge)
        assert "cancelled (run failed when b1 failed)" in history_notes(app, run_id, key)
    assert db.verify(app)[1] == []


def test_a_users_cancel_records_no_cause(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FAIL_FAST)
    work(app, run_id, "c1")
    claim(app, task_id(app, run_id, "a1"), "worker-a")
    app.cancel_workflow_run(run_id)
    for key in ("a1", "a2", "b1"):
        found, cell, _ = cause(app, run_id, key)
        assert found is None and cell == "cancelled", key
    assert render.task_rows([app.get_task_run(task_id(app, run_id, "a2"))], datetime.now(UTC))
