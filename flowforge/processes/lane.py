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


class Done:
    """Set once, when a lane's call has returned; waited for from other threads.

    A lock held from creation and released by :meth:`set`: a wait is one lock operation
    in C, where a ``threading.Event`` takes its Condition's lock and a new lock per
    waiter. A worker waits on one per handler and one per outcome write; each hop costs
    about 40 % less CPU this way (docs/performance.md)."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """Once only (a lane's call returns once)."""
        self._set = True
        self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it is set, waiting at most ``timeout`` seconds (``None``: until it is)."""
        if self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            self._lock.release()  # for any other waiter
            return True
        return False


_Call = tuple[Callable[[], None], Done]


class Lane:
    """Runs submitted calls in order on one thread, started at the first call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, call: Callable[[], None]) -> Done:
        """Queue ``call``; what it returns is set once the call has returned (or raised)."""
        done = Done()
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
