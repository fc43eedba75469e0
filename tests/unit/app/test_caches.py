"""The claims a process remembers so that a finish knows its task without a read."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from uuid import UUID, uuid4

from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.app.advance import leaf_of
from flowforge.app.caches import ClaimCache, DefinitionCache
from flowforge.projections.tables import TaskRunRow, WorkflowRunRow
from flowforge.projections.writes import Leaf
from tests.unit.projections.writes.test_tasks import task_row

AT = datetime(2026, 12, 1, tzinfo=UTC)
CHAIN = {
    "name": "chain",
    "tasks": [{"key": "a", "type": "t"}, {"key": "b", "type": "t", "depends_on": ["a"]}],
}


def claimed(run_id: UUID, key: str, token: int = 1) -> TaskRunRow:
    row = task_row("running", token=token)
    return dataclasses.replace(row, workflow_run_id=run_id, task_key=key)


def parsed(run_id: UUID) -> DefinitionCache:
    definitions = DefinitionCache()
    definitions.of(
        WorkflowRunRow(
            id=run_id,
            workflow_name="chain",
            definition=WorkflowDefinition.model_validate(CHAIN).to_dict(),
            inputs={},
            idempotency_key=None,
            rerun_of=None,
            start_at=None,
            trace_context=None,
            state="running",
            started_at=AT,
            finished_at=None,
            version=2,
            created_at=AT,
            updated_at=AT,
        )
    )
    return definitions


def test_a_claim_is_taken_once_and_only_with_its_own_token() -> None:
    claims, row = ClaimCache(), claimed(uuid4(), "a", token=3)
    claims.remember(row)
    assert claims.take(row.id, 2) is None  # a stale token is not this claim
    assert claims.take(row.id, 3) == row
    assert claims.take(row.id, 3) is None


def test_claims_are_bounded_oldest_first() -> None:
    claims = ClaimCache(size=2)
    rows = [claimed(uuid4(), "a") for _ in range(3)]
    for row in rows:
        claims.remember(row)
    assert claims.take(rows[0].id, 1) is None
    assert [claims.take(r.id, 1) for r in rows[1:]] == rows[1:]


def test_only_a_task_nothing_depends_on_in_a_parsed_definition_is_a_leaf() -> None:
    run_id = uuid4()
    definitions = parsed(run_id)
    assert leaf_of(claimed(run_id, "b"), definitions) == Leaf(
        run_id, "b", claimed(run_id, "b").task_type
    )
    assert leaf_of(claimed(run_id, "a"), definitions) is None  # b depends on a
    assert leaf_of(claimed(uuid4(), "b"), definitions) is None  # definition not parsed
    assert leaf_of(None, definitions) is None
