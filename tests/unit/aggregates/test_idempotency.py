"""An idempotency key reused with another submission: what differs (pure)."""

from __future__ import annotations

from flowforge.aggregates import idempotency

WORKFLOW = {"name": "etl", "tasks": [{"key": "a", "type": "a"}]}


def test_the_same_workflow_and_inputs_do_not_conflict() -> None:
    assert idempotency.conflict(WORKFLOW, {"rows": 3}, dict(WORKFLOW), {"rows": 3}) is None


def test_other_inputs_name_the_keys_changed_added_and_removed() -> None:
    found = idempotency.conflict(WORKFLOW, {"rows": 3, "old": 1}, WORKFLOW, {"rows": 4, "x": 1})
    assert found == "the inputs differ (changed rows; added x; removed old)"


def test_another_workflow_is_named_and_an_edited_one_names_its_fields() -> None:
    other = {**WORKFLOW, "name": "load"}
    assert idempotency.conflict(WORKFLOW, {}, other, {}) == "the workflow is 'load', not 'etl'"
    edited = {**WORKFLOW, "lease_seconds": 60.0}
    assert idempotency.conflict(WORKFLOW, {}, edited, {}) == (
        "the workflow 'etl' differs (in lease_seconds)"
    )


def test_many_changed_keys_are_cut_to_a_few() -> None:
    found = idempotency.conflict(WORKFLOW, {}, WORKFLOW, {f"k{i}": i for i in range(9)})
    assert found is not None and found.endswith("k4 ...)")
