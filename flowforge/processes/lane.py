"""A lane: one daemon thread that runs calls one after another, reused task after task.

A worker runs each handler, and each claim's heartbeat, beside its consumer thread. A new
thread per task makes every task wait for that thread to be scheduled (docs/performance.md,
"Design choices that buy the speed"); a lane starts its thread once.
Daemon, as the per-task threads were: a handler that never returns must not keep the
process from exiting on a stop.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_Call = tuple[Callable[[], None], threading.Event]


class Lane:
    """Runs submitted calls in order on one thread, started at the first call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, call: Callable[[], None]) -> threading.Event:
        """Queue ``call``; the returned event is set once it has returned (or raised)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._calls.put((call, done))
        return done

    def _loop(self) -> None:
        while True:
            call, done = self._calls.get()
            try:
                call()
            except Exception:  # the calls catch their own; this keeps the lane alive
                log.exception("a call on lane %s raised", self._name)
            finally:
                done.set()
