"""The lane: one reused daemon thread that runs calls in order."""

from __future__ import annotations

import threading

from flowforge.processes.lane import Done, Lane

WAIT_S = 10.0


def test_calls_run_in_order_on_one_daemon_thread_that_is_not_the_callers() -> None:
    lane = Lane("test-lane")
    seen: list[tuple[int, int, bool]] = []

    def record(number: int) -> None:
        current = threading.current_thread()
        seen.append((number, threading.get_ident(), current.daemon))

    done = [lane.run(lambda n=n: record(n)) for n in range(5)]  # type: ignore[misc]

    assert all(event.wait(WAIT_S) for event in done)
    assert [number for number, _, _ in seen] == [0, 1, 2, 3, 4]
    assert len({ident for _, ident, _ in seen}) == 1
    assert seen[0][1] != threading.get_ident()
    assert all(daemon for _, _, daemon in seen)


def test_a_call_that_raises_is_done_and_the_lane_runs_the_next() -> None:
    lane = Lane("test-lane")
    ran = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    assert lane.run(boom).wait(WAIT_S)
    assert lane.run(ran.set).wait(WAIT_S)
    assert ran.is_set()


def test_the_done_event_waits_for_a_call_still_running() -> None:
    lane = Lane("test-lane")
    release = threading.Event()

    def held() -> None:
        release.wait(WAIT_S)

    done = lane.run(held)

    assert not done.wait(0.05)  # still running: not done
    release.set()
    assert done.wait(WAIT_S)


def test_done_wakes_every_waiter_and_stays_set() -> None:
    done = Done()
    start = threading.Barrier(4)
    woken: list[bool] = []

    def waiter() -> None:
        start.wait(WAIT_S)
        woken.append(done.wait())  # no timeout: only set() can end it

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    start.wait(WAIT_S)
    assert not done.is_set()
    done.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in threads)
    assert woken == [True, True, True]
    assert done.is_set() and done.wait(0) and done.wait()  # set for good, no wait


def test_done_once_set_answers_every_later_wait_at_once() -> None:
    done = Done()
    done.set()
    assert [done.wait(0), done.wait(0), done.wait()] == [True, True, True]


def test_done_not_set_times_out_with_false() -> None:
    done = Done()
    assert not done.wait(0)
    assert not done.wait(0.01)
    assert not done.is_set()
