"""The cause a cancel records when another task failed for good, read back (and the
errors that are not one: a user's cancel, an event stored before causes, a handler's)."""

from __future__ import annotations

import pytest

from flowforge.aggregates.cancel_cause import (
    RUN_FAILED,
    UPSTREAM_FAILED,
    CancelCause,
    cause_of,
    failed_upstream,
)


@pytest.mark.parametrize(
    ("cause", "short"),
    [
        (CancelCause(UPSTREAM_FAILED, "b1"), "upstream_failed: b1"),
        (CancelCause(RUN_FAILED, "b1"), "run failed when b1 failed"),
    ],
)
def test_a_cause_reads_back_from_the_error_it_records(cause: CancelCause, short: str) -> None:
    assert cause_of(cause.error()) == cause
    assert cause.short() == short
    assert "b1" in cause.error()["message"]


@pytest.mark.parametrize(
    "error",
    [
        None,  # a user's cancel; a cancel event stored before causes
        {},
        {"type": "KeyError", "message": "'clean'"},  # a handler's error, kept on a cancel
        {"type": "RunFailed", "message": "m", "reason": "upstream_failed", "failed_task": "b"},
        {"type": "UpstreamFailed", "message": "m", "reason": "upstream_failed"},
    ],
)
def test_anything_else_is_no_cause(error: dict[str, str] | None) -> None:
    assert cause_of(error) is None


DEPENDS_ON = {"a": (), "b": (), "c": ("a",), "d": ("c", "b"), "e": ("d",)}


@pytest.mark.parametrize(
    ("key", "failed", "upstream"),
    [
        ("c", ["a"], "a"),
        ("e", ["a"], "a"),  # through c and d
        ("e", ["b"], "b"),
        ("e", ["a", "b"], "a"),  # d's first dependency's branch first
        ("d", ["c", "b"], "c"),
        ("c", ["b"], None),
        ("a", ["a"], None),  # itself is not upstream
    ],
)
def test_the_failed_task_upstream_is_the_first_found_in_declared_order(
    key: str, failed: list[str], upstream: str | None
) -> None:
    assert failed_upstream(key, failed, DEPENDS_ON) == upstream
