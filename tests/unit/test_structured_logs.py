"""The structured-logs observer alone (flowforge/structured_logs.py): each event one line
with a stable message and its fields; nothing built for a level not logged."""

from __future__ import annotations

import logging

import pytest

from flowforge import observe, structured_logs


def test_each_event_is_a_line_with_its_name_and_fields(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="flowforge.events")
    with observe.installed(structured_logs.Logs()):
        observe.announce.leases_reaped(2)
        observe.announce.leases_reaped(0)  # nothing reaped: no line
        observe.announce.claim_skipped("not ready")
        observe.announce.dead_lettered()
        observe.announce.tasks_redispatched("queue_short", 3)
        observe.announce.workers_lost_too_often(1)
        observe.announce.workers_lost_too_often(0)  # none: no line
    lines = [(r.levelname, r.getMessage(), r.__dict__["event"]) for r in caplog.records]
    assert lines == [
        ("INFO", "expired leases reaped", "leases_reaped"),
        ("DEBUG", "dispatch skipped", "claim_skipped"),
        ("WARNING", "message dead-lettered", "dead_lettered"),
        ("WARNING", "ready tasks redispatched", "redispatched"),
        ("WARNING", "attempts failed: worker lost too often", "worker_lost"),
    ]
    assert caplog.records[0].__dict__["count"] == 2
    assert caplog.records[1].__dict__["reason"] == "not ready"
    assert (caplog.records[3].__dict__["reason"], caplog.records[3].__dict__["count"]) == (
        "queue_short",
        3,
    )


def test_a_level_not_logged_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flowforge.events")
    structured_logs.Logs().transitions_committed([("task_run", "claim")])
    assert caplog.records == []
