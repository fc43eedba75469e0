"""The heartbeat, on both backends: it renews every lease/3, so a live worker's lease
never lapses, and it stops for good once the lease is lost.

The renewal times are the database's (the audit log's timestamps), the clock that
decides leases.
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections.abc import Iterator
from uuid import UUID

import pytest

from flowforge.app.results import Claim
from flowforge.app.service import FlowForge
from flowforge.processes.heartbeat import Heartbeat
from tests.conftest import empty_postgres
from tests.helpers import one_task, wait_until

ONE = one_task()
#: Long enough that a renewal's own cost (a transaction) is small beside lease/3.
LEASE_S = 3.0
RENEWALS = 4
WAIT_S = 30.0


class CountingFlowForge(FlowForge):
    """The real service, counting the heartbeat's renewals (and telling the test)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.renew_calls = 0
        self.renewed = threading.Event()

    def renew_lease(
        self,
        task_run_id: UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str | None = None,
    ) -> bool:
        self.renew_calls += 1
        self.renewed.set()
        return super().renew_lease(task_run_id, fencing_token, lease_seconds, actor=actor)


@pytest.fixture(params=["postgres", "sqlite"])
def counting_app(request: pytest.FixtureRequest) -> Iterator[CountingFlowForge]:
    url: str = request.getfixturevalue(f"{request.param}_url")
    if request.param == "postgres":
        empty_postgres(url)
    app = CountingFlowForge(url)
    yield app
    app.close()


def claimed(app: FlowForge, lease_s: float) -> Claim:
    (task,) = app.task_runs(app.start_workflow_run(ONE))
    claim = app.claim_task_run(task.id, "w-1", lease_s)
    assert claim is not None
    return claim


def test_the_heartbeat_renews_every_third_of_the_lease_so_the_lease_never_lapses(
    counting_app: CountingFlowForge,
) -> None:
    app = counting_app
    claim = claimed(app, LEASE_S)
    with Heartbeat(app, claim, LEASE_S, "w-1") as heartbeat:
        wait_until(lambda: heartbeat.renewals >= RENEWALS, WAIT_S, f"{RENEWALS} renewals")
    log = [e for e in app.history(claim.task_run_id) if e.transition in ("claim", "renew_lease")]
    assert [e.transition for e in log[:2]] == ["claim", "renew_lease"]
    times = [e.at for e in log]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    # lease/3 apart (a renewal's own transaction, and a busy machine, add a little; the
    # median ignores one slow beat): a heartbeat at lease/2 (1.5x) or lease/4 (0.75x) is
    # outside, one that never renews never gets here.
    assert 0.85 * LEASE_S / 3 <= statistics.median(gaps) <= 1.35 * LEASE_S / 3, gaps
    for before, after in itertools.pairwise(log):
        assert before.lease_expires_at is not None
        assert after.at < before.lease_expires_at, "the lease lapsed between two renewals"
    assert app.expired_leases() == []


def test_the_heartbeat_stops_for_good_once_its_lease_is_lost(
    counting_app: CountingFlowForge,
) -> None:
    app = counting_app
    lease_s = 0.6  # a renewal every 0.2 s
    claim = claimed(app, lease_s)
    with Heartbeat(app, claim, lease_s, "w-1") as heartbeat:
        wait_until(lambda: heartbeat.renewals >= 1, WAIT_S, "a renewal")
        # The attempt ends behind the heartbeat's back (as a reap would end it): the
        # token no longer holds a running row, so the next renewal is refused.
        assert app.finish_task_run(claim.task_run_id, claim.fencing_token, "cancel_running")
        wait_until(lambda: heartbeat.lost, WAIT_S, "the lease lost")
        calls = app.renew_calls
        app.renewed.clear()
        # Five renewal intervals: a heartbeat that kept beating would call again.
        assert not app.renewed.wait(5 * lease_s / 3), "the heartbeat renewed a lost lease"
        assert app.renew_calls == calls
    assert heartbeat.lost
    renewals = [e for e in app.history(claim.task_run_id) if e.transition == "renew_lease"]
    assert len(renewals) == heartbeat.renewals
