"""The shared loop's stop request."""

from __future__ import annotations

import threading

from flowforge.processes import loop


def test_a_stop_interrupts_a_long_wait_at_once() -> None:
    stop = loop.Stop()
    waiting = threading.Barrier(2)
    result: list[bool] = []

    def wait() -> None:
        waiting.wait()
        result.append(stop.wait(60))

    thread = threading.Thread(target=wait)
    thread.start()
    waiting.wait()
    stop.set("test")
    thread.join(5)
    assert not thread.is_alive()
    assert result == [True]
    assert stop.reason == "test"
