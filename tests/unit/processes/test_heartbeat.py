"""The heartbeat against a stand-in for the application: which failures it rides out,
and that any other failure stops it and is reported instead of killing it silently."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from flowforge import errors
from flowforge.app.results import Claim
from flowforge.processes.heartbeat import Heartbeat, renewal_retryable
from flowforge.processes.lane import Done, Lane
from flowforge.processes.steps import PUMP_INTERVAL_S, heartbeat_start_after

#: Beats every LEASE_S / 3 seconds: fast, and the test waits on events, not on time.
LEASE_S = 0.03
#: Only ends a broken test.
DEADLINE_S = 10.0


class Renewer:
    """Answers each renewal with the next of ``answers`` (a value or an error to raise);
    sets ``done`` once they are all used."""

    def __init__(self, *answers: bool | BaseException) -> None:
        self._answers = list(answers)
        self.calls = 0
        self.done = threading.Event()

    def renew_lease(
        self,
        task_run_id: uuid.UUID,
        fencing_token: int,
        lease_seconds: float,
        *,
        actor: str | None = None,
    ) -> bool:
        self.calls += 1
        answer = self._answers.pop(0) if self._answers else True
        if not self._answers:
            self.done.set()
        if isinstance(answer, BaseException):
            raise answer
        return answer


def claim() -> Claim:
    return Claim(uuid.uuid4(), fencing_token=3, attempt=1, lease_expires_at=datetime.now(UTC))


def beat_through(renewer: Renewer) -> Heartbeat:
    """Run a heartbeat until it has had every answer; leaving the block joins its thread."""
    heartbeat = Heartbeat(renewer, claim(), LEASE_S, "w-test")
    with heartbeat:
        assert renewer.done.wait(DEADLINE_S), "the heartbeat never renewed"
    return heartbeat


def test_a_transient_database_error_is_retried_at_the_next_beat() -> None:
    renewer = Renewer(errors.DatabaseUnavailableError("down"), True)
    heartbeat = beat_through(renewer)
    assert renewer.calls >= 2
    assert heartbeat.renewals >= 1
    assert heartbeat.error is None
    assert not heartbeat.lost


def test_a_lost_lease_stops_the_heartbeat() -> None:
    renewer = Renewer(False)
    heartbeat = beat_through(renewer)
    assert heartbeat.lost
    assert heartbeat.error is None
    assert renewer.calls == 1


def test_an_unexpected_error_stops_the_heartbeat_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bug = RuntimeError("a bug in the renewal")
    renewer = Renewer(bug)
    with caplog.at_level(logging.ERROR, logger="flowforge.processes.heartbeat"):
        heartbeat = beat_through(renewer)
    assert heartbeat.error is bug
    assert renewer.calls == 1, "the heartbeat kept renewing after an unexpected error"
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "heartbeat failed; lease no longer renewed"
    assert record.exc_info is not None and record.exc_info[1] is bug


def test_an_unknown_task_run_stops_the_heartbeat_rather_than_being_retried() -> None:
    gone = errors.UnknownTaskRunError("gone")
    heartbeat = beat_through(Renewer(gone))
    assert heartbeat.error is gone


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (errors.DatabaseUnavailableError(), True),
        (errors.TransactionConflictError(), True),
        (errors.PersistenceError("refused"), True),
        (errors.SchemaVersionError(), False),
        (errors.UnknownRunError(), False),
        (errors.BrokerUnavailableError(), False),
        (RuntimeError("bug"), False),
    ],
    ids=lambda value: type(value).__name__,
)
def test_only_database_errors_not_known_to_be_permanent_are_retried(
    exc: BaseException, retryable: bool
) -> None:
    assert renewal_retryable(exc) is retryable


class CountingLane(Lane):
    """A real lane that counts the calls handed to it."""

    def __init__(self) -> None:
        super().__init__("heartbeat-test")
        self.calls = 0

    def run(self, call: Callable[[], None]) -> Done:
        self.calls += 1
        return super().run(call)


def test_a_heartbeat_left_before_its_start_never_touches_its_lane() -> None:
    lane, renewer = CountingLane(), Renewer()
    heartbeat = Heartbeat(renewer, claim(), 30.0, "w-test", lane, start_after=5.0)
    with heartbeat:
        heartbeat.keep_up()  # too early: nothing handed over
    assert not heartbeat.started
    assert lane.calls == 0
    assert renewer.calls == 0


def test_a_heartbeat_kept_up_after_its_start_renews_a_third_of_the_lease_after_entering() -> None:
    lease_s, start_after = 1.2, 0.2  # due at 0.4 s; counted from the start it would be 0.6
    lane, renewer = CountingLane(), Renewer(True)
    heartbeat = Heartbeat(renewer, claim(), lease_s, "w-test", lane, start_after=start_after)
    with heartbeat:
        entered = time.monotonic()
        while not heartbeat.started and time.monotonic() - entered < DEADLINE_S:
            heartbeat.keep_up()
            time.sleep(0.005)
        started = time.monotonic() - entered
        assert renewer.done.wait(DEADLINE_S), "the heartbeat never renewed"
        renewed = time.monotonic() - entered
        heartbeat.keep_up()  # once started, never handed over again
    assert lane.calls == 1
    assert start_after <= started < lease_s / 3
    assert lease_s / 3 <= renewed < lease_s / 3 + start_after / 2, (started, renewed)


@pytest.mark.parametrize("start_after", [-0.1, 0.2, 1.0])
def test_a_start_that_would_make_the_first_renewal_late_is_refused(start_after: float) -> None:
    with pytest.raises(ValueError, match="less than a third of the lease"):
        Heartbeat(Renewer(), claim(), 0.6, "w-test", start_after=start_after)


@pytest.mark.parametrize(
    ("lease_s", "start_after"),
    [(30.0, PUMP_INTERVAL_S), (6 * PUMP_INTERVAL_S, PUMP_INTERVAL_S), (0.2, 0.0), (0.03, 0.0)],
)
def test_the_worker_starts_a_heartbeat_late_only_when_its_first_renewal_allows(
    lease_s: float, start_after: float
) -> None:
    assert heartbeat_start_after(lease_s) == start_after
    Heartbeat(Renewer(), claim(), lease_s, "w-test", start_after=heartbeat_start_after(lease_s))
