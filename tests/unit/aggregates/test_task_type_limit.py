"""The pure rules of concurrency limits, and the TaskTypeLimit aggregate's events."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge import errors
from flowforge.aggregates import task_type_limit
from flowforge.aggregates.definition import MAX_RUNNING, parse_definition
from flowforge.aggregates.task_type_limit import TaskTypeLimit

AT = datetime(2026, 1, 1, tzinfo=UTC)
limits = st.one_of(st.none(), st.integers(1, MAX_RUNNING))


@given(st.lists(limits, max_size=4))
def test_the_effective_limit_is_the_smallest_present_one(given_limits: list[int | None]) -> None:
    effective = task_type_limit.effective_limit(given_limits)
    present = [limit for limit in given_limits if limit is not None]
    if not present:
        assert effective is None
    else:
        assert effective in present and all(effective <= limit for limit in present)


@given(st.integers(0, 100), limits, st.integers(0, 100), limits)
def test_a_claim_needs_room_under_every_limit_it_has(
    type_running: int, type_limit: int | None, run_running: int, run_limit: int | None
) -> None:
    allowed = task_type_limit.may_claim(type_running, type_limit, run_running, run_limit)
    type_room = type_limit is None or type_running < type_limit
    run_room = run_limit is None or run_running < run_limit
    assert allowed == (type_room and run_room)


@given(st.integers(1, 50), st.lists(st.booleans(), max_size=60))
def test_claims_and_frees_under_the_rule_never_exceed_the_limit(
    limit: int, steps: list[bool]
) -> None:
    """A counter kept by the rule (claim: take a slot if there is room; free: give one
    back) stays within 0..limit whatever the order of claims and frees."""
    running = 0
    for claims in steps:
        if claims and task_type_limit.has_room(running, limit):
            running += 1
        elif not claims and running:
            running -= 1
        assert 0 <= running <= limit


def test_a_limit_change_is_the_aggregates_next_event_and_replays() -> None:
    created = task_type_limit.change_event("slow", 0, 2, at=AT, actor="user:ops")
    changed = task_type_limit.change_event("slow", 1, 5, at=AT, actor="user:ops")
    removed = task_type_limit.change_event("slow", 2, None, at=AT, actor="user:lead")
    assert [e.originator_version for e in (created, changed, removed)] == [1, 2, 3]
    assert {e.originator_id for e in (created, changed, removed)} == {
        task_type_limit.limit_id("slow")
    }
    events: list[Any] = [created, changed, removed]
    limit: Any = None
    for event in events[:2]:
        limit = event.mutate(limit)
    assert isinstance(limit, TaskTypeLimit) and limit.max_running == 5
    limit = events[2].mutate(limit)
    assert (limit.task_type, limit.max_running, limit.version) == ("slow", None, 3)
    assert task_type_limit.limit_id("slow") != task_type_limit.limit_id("fast")


@pytest.mark.parametrize("bad", [0, -3, MAX_RUNNING + 1, 2.0, "2", True, None])
def test_a_limit_must_be_a_whole_number_from_1(bad: Any) -> None:
    with pytest.raises(errors.InvalidLimitError, match="limit must be"):
        task_type_limit.checked_max_running(bad)


@pytest.mark.parametrize("bad", ["", "9lives", "with space", "a-b", 3])
def test_a_task_type_must_be_a_plain_identifier(bad: Any) -> None:
    with pytest.raises(errors.InvalidLimitError, match="plain identifier"):
        task_type_limit.checked_task_type(bad)


def test_a_definition_declares_a_tasks_max_running_and_a_runs_max_running_tasks() -> None:
    definition = parse_definition(
        {
            "name": "w",
            "max_running_tasks": 3,
            "tasks": [{"key": "a", "type": "t", "max_running": 2}, {"key": "b", "type": "t"}],
        }
    )
    assert definition.max_running_tasks == 3
    assert [t.max_running for t in definition.tasks] == [2, None]


@pytest.mark.parametrize(
    ("field", "where"),
    [
        ({"max_running_tasks": 0}, "max_running_tasks"),
        ({"max_running_tasks": 1.5}, "max_running_tasks"),
        ({"tasks": [{"key": "a", "type": "t", "max_running": 0}]}, "tasks[0].max_running"),
        ({"tasks": [{"key": "a", "type": "t", "max_running": "2"}]}, "tasks[0].max_running"),
    ],
)
def test_a_bad_limit_in_a_definition_names_its_field(field: dict[str, Any], where: str) -> None:
    data = {"name": "w", "tasks": [{"key": "a", "type": "t"}], **field}
    with pytest.raises(errors.InvalidWorkflowDefinitionError, match=rf"^{re.escape(where)}: "):
        parse_definition(data)
