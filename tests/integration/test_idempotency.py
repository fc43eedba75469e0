"""Idempotency keys through the application service, on both backends: the same key
with the same submission returns its run; with another workflow or other inputs it is
refused, naming what differs, and creates nothing."""

from __future__ import annotations

import pytest

from flowforge import errors
from flowforge.app.service import FlowForge
from tests.helpers import one_task


def test_a_key_reused_with_the_same_submission_returns_its_run(app: FlowForge) -> None:
    first = app.submit_workflow_run(one_task(), {"rows": 3}, idempotency_key="nightly")
    again = app.submit_workflow_run(one_task(), {"rows": 3}, idempotency_key="nightly")
    assert (first.created, again.created) == (True, False)
    assert again.run_id == first.run_id


def test_a_key_reused_with_other_inputs_or_workflow_is_refused_and_creates_nothing(
    app: FlowForge,
) -> None:
    run_id = app.start_workflow_run(one_task(), {"rows": 3}, idempotency_key="nightly")
    with pytest.raises(errors.IdempotencyKeyConflictError, match=r"changed rows\)"):
        app.start_workflow_run(one_task(), {"rows": 4}, idempotency_key="nightly")
    with pytest.raises(
        errors.IdempotencyKeyConflictError, match="the workflow is 'two', not 'one'"
    ):
        app.start_workflow_run(
            {**one_task(), "name": "two"}, {"rows": 3}, idempotency_key="nightly"
        )
    assert [run.id for run in app.recent_runs(10)] == [run_id]
