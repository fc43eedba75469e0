"""Signals relayed to a thread: a handler that takes no lock.

A Python signal handler runs in the main thread between two of its bytecodes, and that
thread may be holding the very lock the handler's work needs: an ``Event``'s (its
``set``), a logging stream's. Taking it there deadlocks the process. That hung a
worker's shutdown: two SIGTERMs microseconds apart (a process group's kill, and
``timeout`` forwarding it to its child) found the main thread just back inside its
``Event.wait`` lock, and the second handler's ``Event.set`` waited on it for ever.

So the handler only writes the signal's number to a pipe (a system call, no lock), and a
daemon thread reads the pipe and reacts, as ordinary code that may lock and log.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from types import FrameType

log = logging.getLogger(__name__)

#: What asks a FlowForge process to stop (the default SIGTERM would kill it mid-task).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def relay_signals(
    react: Callable[[signal.Signals], None], signums: Iterable[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """Run ``react(signal)`` on a thread of its own for each of ``signums`` received
    (main thread only: Python installs handlers there). Returns ``restore``: the
    previous handlers back, and the thread ended."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def handle(signum: int, _frame: FrameType | None) -> None:
        # A full pipe already holds signals the thread has yet to react to; a closed
        # one belongs to a relay that was restored.
        with suppress(OSError):
            os.write(write_fd, bytes([signum]))

    def watch() -> None:
        with open(read_fd, "rb", buffering=0) as pipe:
            while received := pipe.read(1):
                try:
                    react(signal.Signals(received[0]))
                except Exception:  # a reaction that fails must not end the relay
                    log.exception("reacting to a signal failed")

    threading.Thread(target=watch, name="signals", daemon=True).start()
    previous = {signum: signal.signal(signum, handle) for signum in signums}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_fd)  # the thread reads end-of-file and returns

    return restore
