"""The one thread supervisor: a failed thread stops the process, its error logged and
re-raised; a thread that returns unasked stops it too; a stop ends every thread."""

from __future__ import annotations

import logging
import threading

import pytest

from flowforge.processes.loop import Stop
from flowforge.processes.supervisor import Supervisor

#: Only ends a broken test.
DEADLINE_S = 10.0


def loop_until_stopped(stop: Stop, started: threading.Barrier) -> None:
    """A long-running process's shape: set up, then wait on the stop."""
    started.wait(DEADLINE_S)
    while not stop.wait(DEADLINE_S):
        pass


def test_a_failed_thread_stops_the_others_and_its_error_is_logged_and_re_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = Stop()
    started = threading.Barrier(3)
    crash = RuntimeError("the scheduler crashed")

    def crashing() -> None:
        started.wait(DEADLINE_S)
        raise crash

    supervisor = Supervisor(stop)
    with (
        caplog.at_level(logging.ERROR, logger="flowforge.processes.supervisor"),
        pytest.raises(RuntimeError) as caught,
    ):
        supervisor.run(
            [
                ("scheduler", crashing),
                ("worker-1", lambda: loop_until_stopped(stop, started)),
                ("worker-2", lambda: loop_until_stopped(stop, started)),
            ]
        )
    assert caught.value is crash
    assert stop.reason == "scheduler failed"
    assert not supervisor.alive
    [record] = caplog.records
    assert record.getMessage() == "process thread failed"
    assert record.exc_info is not None and record.exc_info[1] is crash


def test_a_thread_that_returns_without_a_stop_request_stops_the_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = Stop()
    started = threading.Barrier(2)

    def quitter() -> None:
        started.wait(DEADLINE_S)

    supervisor = Supervisor(stop)
    with caplog.at_level(logging.ERROR, logger="flowforge.processes.supervisor"):
        supervisor.run(
            [("publisher", quitter), ("worker-1", lambda: loop_until_stopped(stop, started))]
        )
    assert stop.reason == "publisher exited"
    assert not supervisor.alive
    assert [r.getMessage() for r in caplog.records] == [
        "process thread returned without a stop request"
    ]


def test_a_stop_request_ends_every_thread_and_nothing_is_raised() -> None:
    stop = Stop()
    started = threading.Barrier(3)
    supervisor = Supervisor(stop)
    for name in ("worker-1", "worker-2"):
        supervisor.spawn(name, lambda: loop_until_stopped(stop, started))
    started.wait(DEADLINE_S)
    assert supervisor.alive
    stop.set("SIGTERM")
    supervisor.join()
    assert not supervisor.alive
    assert supervisor.errors == []
    assert stop.reason == "SIGTERM"
