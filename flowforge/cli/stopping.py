"""How ``run`` and ``demo`` stop: on time, on the first Ctrl-C gracefully, on the second
at once, and always saying what the database now holds.

A stop (``--timeout`` passed, SIGINT or SIGTERM) stops the scheduler, the publisher and
the workers. Each worker finishes the task in hand, for at most ``--grace`` seconds
(default 5); a second SIGINT or SIGTERM ends that wait at once. A task still running then is
abandoned: it keeps its lease until the lease expires, and then the reaper of any later
scheduler (``flowforge run --resume``, or a deployment's ``flowforge scheduler``) moves
it back to ready and it runs again. The fencing token makes a late write by the
abandoned attempt harmless.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from flowforge.processes.loop import Stop

#: What stops `run` and `demo` cleanly (the default SIGTERM would kill them mid-task).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The first SIGINT/SIGTERM requests a graceful stop; the second, ``hurry``.

    The handlers only set events: printing from a signal handler could interrupt a
    print in progress. The group's threads cannot install handlers, so this is done
    here, in the main thread; the previous handlers are restored on exit.
    """

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.hurry = threading.Event()
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set():  # a stop is under way (a signal's, or the timeout's)
            self.hurry.set()
        else:
            self.stop.set(signal.Signals(signum).name)

    def __enter__(self) -> Interrupts:
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
