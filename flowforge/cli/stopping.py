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
from collections.abc import Callable
from types import TracebackType

from flowforge.processes.loop import Stop
from flowforge.processes.signals import relay_signals


class Interrupts:
    """The first SIGINT/SIGTERM requests a graceful stop; the second, ``hurry``.

    The reaction only sets events (printing could interrupt a print in progress), and it
    runs on the relay's thread, not in the handler (``flowforge.processes.signals``).
    The group's threads cannot install handlers, so this is done here, in the main
    thread; the previous handlers are restored on exit.
    """

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.hurry = threading.Event()
        self._restore: Callable[[], None] | None = None

    def _react(self, signum: signal.Signals) -> None:
        if self.stop.is_set():  # a stop is under way (a signal's, or the timeout's)
            self.hurry.set()
        else:
            self.stop.set(signum.name)

    def __enter__(self) -> Interrupts:
        self._restore = relay_signals(self._react)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self._restore is not None:
            self._restore()
