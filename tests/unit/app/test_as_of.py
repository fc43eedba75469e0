"""The one fold of a run's audit log as of a moment (``app/as_of.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from flowforge.app import as_of
from flowforge.app.results import AuditEntry

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
RUN, LOAD, SAVE = UUID(int=1), UUID(int=2), UUID(int=3)


def entry(seconds: float, aggregate_id: UUID, version: int, target: str) -> AuditEntry:
    aggregate = "WorkflowRun" if aggregate_id == RUN else "TaskRun"
    at = T0 + timedelta(seconds=seconds)
    return AuditEntry(at, aggregate, aggregate_id, version, "e", "t", None, target, "user")


LOG = [
    entry(0, RUN, 1, "pending"),
    entry(0, LOAD, 1, "ready"),
    entry(0, SAVE, 1, "pending"),
    entry(1, LOAD, 2, "running"),
    entry(1, RUN, 2, "running"),
    entry(2, LOAD, 3, "succeeded"),
    entry(3, SAVE, 2, "ready"),
]


def test_as_of_a_moment_each_aggregate_is_at_its_last_entry_no_later_than_it() -> None:
    then = as_of.fold(LOG, T0 + timedelta(seconds=1.5))
    assert then.entries == LOG[:5]
    assert {i: e.version for i, e in then.last.items()} == {RUN: 2, LOAD: 2, SAVE: 1}
    assert list(then.last) == [RUN, LOAD, SAVE]  # in the order they first appear
    assert then.run is LOG[4]
    assert [e.aggregate_id for e in then.tasks] == [LOAD, SAVE]


def test_without_a_moment_the_fold_is_the_whole_log_and_before_it_nothing() -> None:
    assert as_of.fold(LOG).entries == LOG
    assert as_of.fold(LOG).last[SAVE] is LOG[-1]
    before = as_of.fold(LOG, T0 - timedelta(seconds=1))
    assert (before.entries, before.last, before.run) == ([], {}, None)
