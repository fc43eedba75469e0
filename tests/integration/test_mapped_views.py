"""How a run with a mapped task (issue 46) reads, on both backends: an element waiting
for its retry counted as retrying (not failed) in the grouped line, and `why --at`
of a mapped task and of its elements."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flowforge.app.service import FlowForge
from flowforge.cli import mapped_lines
from tests.helpers import task_id
from tests.integration.test_mapped_tasks import LEASE_S, succeed_list_files


def retrying_workflow() -> dict[str, Any]:
    """list_files -> process (mapped, 2 attempts, the retry far off): a leaf."""
    retry = {"max_attempts": 2, "backoff_seconds": 600.0, "jitter": 0.0}
    return {
        "name": "mapped_retry",
        "tasks": [
            {"key": "list_files", "type": "list_files"},
            {"key": "process", "type": "process", "map_over": "list_files", "retry": retry},
        ],
    }


def fail_element(app: FlowForge, run_id: UUID, key: str) -> None:
    """Claim and fail ``key``'s attempt, as a worker does."""
    claim = app.claim_task_run(task_id(app, run_id, key), "w", LEASE_S)
    assert claim is not None
    error = {"type": "RuntimeError", "message": "broke"}
    assert app.finish_task_run(claim.task_run_id, claim.fencing_token, "fail", None, error)


def test_an_element_failed_with_attempts_left_counts_as_retrying_not_failed(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(retrying_workflow())
    assert succeed_list_files(app, run_id, [1, 2, 3])
    fail_element(app, run_id, "process[1]")
    element = next(t for t in app.task_runs(run_id) if t.task_key == "process[1]")
    assert element.state == "failed"  # its retry not scheduled yet: no scheduler passed

    (view,) = app.mapped_tasks(app.get_workflow_run(run_id))

    assert view.counts == {"ready": 2, "retrying": 1}
    assert view.state == "retrying"
    assert mapped_lines.view_line(view) == "process[0..2]: 2 ready, 1 retrying"
    _, groups = mapped_lines.split(app.task_runs(run_id))
    assert mapped_lines.group_line("process", groups["process"]) == (
        "process[0..2]: 2 ready, 1 retrying"
    )
