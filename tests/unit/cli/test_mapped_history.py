"""``history``'s collapse of an expansion's creations (``mapped_lines.collapsed_history``):
one line for a run of consecutive creations, with the index range, or, for keys a
``map_key`` named, without one."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from flowforge.app.results import AuditEntry
from flowforge.cli import mapped_lines

AT = datetime(2026, 12, 5, tzinfo=UTC)


def created(key: str) -> AuditEntry:
    return AuditEntry(
        at=AT,
        aggregate="TaskRun",
        aggregate_id=uuid4(),
        version=1,
        event="Created",
        transition="",
        source=None,
        target="ready",
        actor="worker",
        task_key=key,
    )


@pytest.mark.parametrize(
    ("keys", "line"),
    [
        ([f"process[{i}]" for i in range(4)], "process[0..3] (4 elements)"),
        (["process[b.csv]", "process[7]", "process[a.csv]"], "process[...] (3 elements)"),
    ],
)
def test_an_expansion_is_one_line_with_its_range_or_without_for_named_keys(
    keys: list[str], line: str
) -> None:
    (entry,) = mapped_lines.collapsed_history([created(key) for key in keys])
    assert entry.task_key == line
