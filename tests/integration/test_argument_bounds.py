"""The service's numeric arguments are bounded before any I/O, on both backends: a lease
of inf or 1e300 seconds is a ValueError naming the argument, never PostgreSQL's
"interval out of range" or SQLite's OverflowError."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from flowforge import FlowForge
from flowforge.errors import InvalidWorkflowDefinitionError

CALLS: dict[str, Callable[[FlowForge, float], Any]] = {
    "lease_seconds (claim)": lambda app, v: app.claim_task_run(uuid.uuid4(), "w", v),
    "lease_seconds (renew)": lambda app, v: app.renew_lease(uuid.uuid4(), 1, v),
    "retry_delay_seconds": lambda app, v: app.schedule_retry(uuid.uuid4(), v),
    "older_than_seconds": lambda app, v: app.redispatch_stalled(v),
}


@pytest.mark.parametrize("value", [float("inf"), 1e300, 2.0**63, float("nan")])
@pytest.mark.parametrize("call", CALLS)
def test_an_unbounded_duration_is_refused_naming_the_argument(
    app: FlowForge, call: str, value: float
) -> None:
    with pytest.raises(ValueError, match=call.split(maxsplit=1)[0]):
        CALLS[call](app, value)


WORKFLOW = {"name": "w", "tasks": [{"key": "a", "type": "a"}]}
TEXT_CALLS: dict[str, Callable[[FlowForge], Any]] = {
    "idempotency_key": lambda app: app.submit_workflow_run(
        WORKFLOW, {}, idempotency_key="key-\udcff"
    ),
    "actor": lambda app: app.submit_workflow_run(WORKFLOW, {}, actor="\ud800"),
    "worker_id": lambda app: app.claim_task_run(uuid.uuid4(), "w-\udcfe", 30),
    "inputs": lambda app: app.submit_workflow_run(WORKFLOW, {"k": "v\udcff"}),
    "description": lambda app: app.submit_workflow_run({**WORKFLOW, "description": "\udcff"}),
}


@pytest.mark.parametrize("call", TEXT_CALLS)
def test_text_that_is_not_valid_unicode_is_refused_naming_the_argument(
    app: FlowForge, call: str
) -> None:
    with pytest.raises((ValueError, InvalidWorkflowDefinitionError), match=call):
        TEXT_CALLS[call](app)
    assert app.recent_runs() == []


LISTINGS: dict[str, Callable[[FlowForge, Any], Any]] = {
    "recent_runs": lambda app, v: app.recent_runs(v),
    "ready_task_runs": lambda app, v: app.ready_task_runs(v),
    "expired_leases": lambda app, v: app.expired_leases(v),
}


@pytest.mark.parametrize("value", [0, -1, 100_001, 10**12, 2.5, True, "10"])
@pytest.mark.parametrize("call", LISTINGS)
def test_a_listing_limit_outside_1_to_100000_rows_is_refused_naming_it(
    app: FlowForge, call: str, value: Any
) -> None:
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 100,000"):
        LISTINGS[call](app, value)


#: What each listing holds after one one-task run is started: the run, its ready task,
#: no expired lease.
LISTED = {"recent_runs": 1, "ready_task_runs": 1, "expired_leases": 0}


@pytest.mark.parametrize("call", LISTINGS)
def test_a_listing_takes_any_limit_within_bounds(app: FlowForge, call: str) -> None:
    app.start_workflow_run(WORKFLOW)
    for limit in (1, 100_000):
        assert len(LISTINGS[call](app, limit)) == LISTED[call]
