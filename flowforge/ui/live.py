"""Live updates: the pages learn that something changed without reloading.

One thread per UI process watches the audit log's newest position
(``FlowForge.last_change``: one index probe) and wakes the pages' event streams
(server-sent events, ``/events``) when it moves. It looks when a wake-up bell rings, so on
PostgreSQL a commit that notifies (a transition that marks its run, a dispatch) is seen at
once, and at least every ``POLL_S`` otherwise (a claim, which notifies nobody; every
change on SQLite, which has no notifications). Event positions come from a sequence, so
two transactions can commit out of their positions' order: after each change it looks
once more ``SETTLE_S`` later, for a commit that took a lower position and landed just
after. A page that receives a change fetches itself again and swaps its content
(``static/ui.js``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

from flowforge.app.service import FlowForge

log = logging.getLogger(__name__)

#: The longest a change that rang no bell waits to be seen.
POLL_S = 1.0
#: The second look after a change, for a commit that landed out of position order.
SETTLE_S = 0.5
#: A comment line sent on an idle stream, so that proxies keep it open.
KEEPALIVE_S = 15.0


class ChangeFeed:
    """The audit log's newest position, followed by a thread and told to async waiters."""

    def __init__(self, app: FlowForge, *, poll_s: float = POLL_S) -> None:
        self._app = app
        self._poll_s = poll_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._moved = asyncio.Event()
        #: How many changes were told (a second look counts as one): what a stream has seen.
        self.told = 0
        self.position = 0
        self.closed = False

    def start(self) -> None:
        """Start following, from the running event loop (the server's)."""
        self._loop = asyncio.get_running_loop()
        self._moved = asyncio.Event()
        self.position = self._app.last_change()
        self._thread = threading.Thread(target=self._follow, name="flowforge-ui-live", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """End every stream and stop following, at once, from any thread: a server that
        is stopping has no open request left to wait for."""
        self._stopped.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._close_streams)

    def stop(self) -> None:
        """:meth:`close`, then wait for the following thread to end."""
        self.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close_streams(self) -> None:
        self.closed = True
        self._moved.set()

    async def changes(self) -> AsyncIterator[int | None]:
        """The position at each change told from now on; ``None`` after ``KEEPALIVE_S``
        without one. Ends when the feed stops."""
        seen = self.told
        while not self.closed:
            moved = self._moved
            if self.told != seen:
                seen = self.told
                yield self.position
                continue
            try:
                await asyncio.wait_for(moved.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield None

    def _tell(self, position: int) -> None:
        self.position, self.told = position, self.told + 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def _follow(self) -> None:
        with self._app.listening(ready_timeout=1.0) as wakeups, wakeups.either() as rung:
            last, second_look = self.position, False
            while not self._stopped.is_set():
                rung.wait(SETTLE_S if second_look else self._poll_s)
                last, second_look = self._look(last, second_look)

    def _look(self, last: int, second_look: bool) -> tuple[int, bool]:
        """Tell the streams if the position moved since ``last``, or if this is the second
        look after a move; the position now, and whether to look again soon."""
        try:
            position = self._app.last_change()
        except Exception:  # the database away: look again at the next poll
            log.warning("the UI could not read the audit log's position", exc_info=True)
            return last, False
        moved = position != last
        if (moved or second_look) and self._loop is not None:
            self._loop.call_soon_threadsafe(self._tell, position)
        return position, moved
