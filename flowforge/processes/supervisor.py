"""The one thread supervisor: a process's loops as threads, watched.

Every long-running process has the same shape (``loop.py``): ``run()`` sets up, then
waits on "work | poll interval | stop requested". When a process runs several loops
(the embedded ``flowforge run``, ``flowforge worker --concurrency N``), each runs in a
thread of this supervisor, and a thread that fails stops them all with its error
logged: a half-running process hides the fault. A thread that returns while no stop
was requested stops the process too: every loop here runs until it is told to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from flowforge import errors
from flowforge.processes.loop import Stop

log = logging.getLogger(__name__)

#: How often ``run`` checks on its threads while it waits for a stop.
WATCH_INTERVAL_S = 0.5
#: How often a ``join`` with a grace checks for a hurry.
JOIN_POLL_S = 0.05

Target = Callable[[], None]


class Supervisor:
    """Runs named targets in threads until ``stop``; the first failure stops them all."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        #: Each failed thread's error, in the order they failed.
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def spawn(self, name: str, target: Target) -> None:
        thread = threading.Thread(target=self._watched, args=(name, target), name=name)
        # Daemon: a thread stuck in a handler must not keep the interpreter alive after
        # the main thread has given up on it; every normal exit joins them first.
        thread.daemon = True
        thread.start()
        self._threads.append(thread)

    def _watched(self, name: str, target: Target) -> None:
        try:
            target()
        except BaseException as exc:
            # Stop first, then log: a failure to log must not leave the others running.
            with self._lock:
                self.errors.append(exc)
            self.stop.set(f"{name} failed")
            # Not "process": LogRecord reserves it (the OS process id). A FlowForge error
            # (a queue-type mismatch, say) reaches the user once, as the CLI's one-line
            # error; only anything else, a bug, is logged with its traceback.
            if isinstance(exc, errors.FlowForgeError):
                log.error("process thread stopped", extra={"process_name": name})
            else:
                log.exception("process thread failed", extra={"process_name": name})
            return
        if not self.stop.is_set():
            self.stop.set(f"{name} exited")
            log.error(
                "process thread returned without a stop request", extra={"process_name": name}
            )

    @property
    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def join(self, grace: float | None = None, hurry: threading.Event | None = None) -> list[str]:
        """Stop every thread, wait for them, and re-raise the first failure; the names of
        the threads abandoned still running.

        Without ``grace`` the wait is for as long as they take. With it, the wait ends
        after ``grace`` seconds or as soon as ``hurry`` is set, and the threads still
        running are abandoned (daemons: they end with the process).
        """
        self.stop.set("shutdown")
        deadline = None if grace is None else time.monotonic() + grace
        for thread in self._threads:
            while thread.is_alive() and not (hurry is not None and hurry.is_set()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                thread.join(JOIN_POLL_S if left is None else min(JOIN_POLL_S, left))
        if self.errors:
            raise self.errors[0]
        return [thread.name for thread in self._threads if thread.is_alive()]

    def run(
        self,
        targets: Sequence[tuple[str, Target]],
        grace: float | None = None,
        *,
        stopping: Callable[[], None] = lambda: None,
    ) -> list[str]:
        """Run ``targets`` until a stop (a signal, or a thread's failure); re-raise it.
        After the stop (``stopping()`` first: what the process says of it), wait for the
        threads, at most ``grace`` seconds, if given (a handler that hangs must not hold
        the process hostage), and not at all once a second signal sets ``stop.hurry``;
        the names of those abandoned still running.

        The signal handlers are installed here, in the calling (main) thread: a loop
        installs them from its own ``run()``, which is a no-op outside the main thread.
        """
        self.stop.install_signal_handlers()
        for name, target in targets:
            self.spawn(name, target)
        while self.alive and not self.stop.wait(WATCH_INTERVAL_S):
            pass
        stopping()
        return self.join(grace=grace, hurry=self.stop.hurry)
