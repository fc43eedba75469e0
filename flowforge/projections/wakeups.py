"""Wake-ups: a commit that leaves work for another loop wakes it at once.

Two kinds of work are announced: a run to advance (a ``run_wakeups`` row) and a dispatch
to publish (an outbox row). Each has a :class:`Bell`. After a commit that wrote such a
row, the store rings this process's bell (the embedded mode: every loop in one process)
and, on PostgreSQL, asks its :class:`PostgresNotifier` to NOTIFY the channel; a
:class:`PostgresListener` in each scheduler and publisher process rings its bells when
the notification arrives.

The NOTIFY is sent after the commit, on a connection of the notifier's own, and
coalesced (one NOTIFY covers every commit that asked while the previous one was being
sent), never inside the writing transaction: PostgreSQL holds a cluster-wide lock from a
notifying transaction's pre-commit until its commit is flushed, which serialises every
notifying commit behind the disk (docs/performance.md, "Design choices that buy the
speed").

A bell is only a hint to look now: the rows are the truth. A notification lost (a crash
between the commit and the NOTIFY, a listener reconnecting) costs a poll interval, never
a run: each loop's periodic pass reads the rows, and a listener that reconnects rings
its bells once for whatever committed while it was not listening (a loop's first pass
covers what came before its first LISTEN).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from flowforge.backoff import Backoff
from flowforge.projections import statements

log = logging.getLogger(__name__)

#: How long the listener blocks for a notification before checking for a stop.
LISTEN_POLL_S = 0.25
#: The listener's reconnect waits: doubling from the base up to the cap, each the
#: ceiling (not jittered), so the first retry comes after the base.
RECONNECT_BASE_S = 0.2
RECONNECT_CAP_S = 5.0
#: The least time between two NOTIFYs of one process. A request after a quiet spell is
#: sent at once; requests during a burst wait out the interval and share one NOTIFY
#: (a producer starting runs back to back would otherwise send one NOTIFY, a commit,
#: per run). Small beside the periodic passes.
NOTIFY_MIN_INTERVAL_S = 0.005


class Bell:
    """A wake-up that is not lost between rings: :meth:`wait` returns at once if the
    bell rang since the last wait, else sleeps until a ring or the timeout."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._rung = False
        self._echoes: list[Bell] = []

    def ring(self) -> None:
        with self._condition:
            self._rung = True
            self._condition.notify_all()
            echoes = list(self._echoes)
        for echo in echoes:
            echo.ring()

    def echo(self, other: Bell, *, on: bool = True) -> None:
        """Ring ``other`` too each time this bell rings (``on=False``: no more): one
        waiter can then wait for any of several bells."""
        with self._condition:
            if on:
                self._echoes.append(other)
            elif other in self._echoes:
                self._echoes.remove(other)

    def wait(self, seconds: float) -> bool:
        """True if rung (and clears it); False if ``seconds`` passed first."""
        with self._condition:
            if not self._rung:
                self._condition.wait(max(0.0, seconds))
            rung, self._rung = self._rung, False
            return rung


@dataclass
class Wakeups:
    """The bells of one process: runs to advance, dispatches to publish."""

    runs: Bell = field(default_factory=Bell)
    outbox: Bell = field(default_factory=Bell)

    @contextmanager
    def either(self) -> Iterator[Bell]:
        """A bell rung whenever either of these rings, while the block runs."""
        either = Bell()
        for bell in (self.runs, self.outbox):
            bell.echo(either)
        try:
            yield either
        finally:
            for bell in (self.runs, self.outbox):
                bell.echo(either, on=False)

    def by_listen_statement(self) -> Mapping[str, tuple[str, Bell]]:
        return {
            "listen_run_wakeups": (statements.RUN_WAKEUPS_CHANNEL, self.runs),
            "listen_outbox": (statements.OUTBOX_CHANNEL, self.outbox),
        }


#: Opens a new autocommit connection outside the pool.
Connect = Callable[[], psycopg.Connection[Any]]


class PostgresListener:
    """A thread on a dedicated connection that LISTENs and rings the bells.

    Dedicated, not pooled: a LISTEN belongs to a session, and the pool's connections
    are shared. On a lost connection it reconnects with a capped backoff and rings
    every bell once listening again, since notifications sent meanwhile are gone.
    """

    def __init__(self, connect: Connect, wakeups: Wakeups) -> None:
        self._connect = connect
        self._bells = wakeups.by_listen_statement()
        self._stopped = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flowforge-listener", daemon=True)

    def start(self) -> PostgresListener:
        self._thread.start()
        return self

    def wait_listening(self, timeout: float) -> bool:
        """True once LISTEN is in place (tests wait for it before committing)."""
        return self._listening.wait(timeout)

    def close(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        backoff = Backoff(base=RECONNECT_BASE_S, cap=RECONNECT_CAP_S, rand=lambda: 1.0)
        while not self._stopped.is_set():
            try:
                self._listen(reconnected=backoff.failures > 0)
                backoff.reset()
            except psycopg.Error as exc:
                self._listening.clear()
                delay = backoff.next_delay()
                log.warning(
                    "wake-up listener lost its connection; the periodic pass covers",
                    extra={"error": str(exc).strip().splitlines()[0:1], "retry_in_s": delay},
                )
                self._stopped.wait(delay)

    def _listen(self, *, reconnected: bool) -> None:
        sql = statements.load("postgres")
        by_channel = {}
        with self._connect() as conn:
            for name, (channel, bell) in self._bells.items():
                conn.execute(sql[name])
                by_channel[channel] = bell
            if reconnected:  # what committed while we were not listening
                for bell in by_channel.values():
                    bell.ring()
            self._listening.set()
            while not self._stopped.is_set():
                for notify in conn.notifies(timeout=LISTEN_POLL_S):
                    by_channel[notify.channel].ring()


class PostgresNotifier:
    """NOTIFYs after commits, coalesced, from a thread with a connection of its own:
    one NOTIFY covers every request made while the previous one was in flight or less
    than ``min_interval_s`` ago.

    :meth:`request` never blocks the committing thread and never raises: a failed
    NOTIFY is logged and dropped (the periodic passes cover), and the connection is
    opened again on the next request.
    """

    def __init__(self, connect: Connect, min_interval_s: float = NOTIFY_MIN_INTERVAL_S) -> None:
        self._connect = connect
        self._min_interval_s = min_interval_s
        self._pending: set[str] = set()
        self._condition = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._last_sent = float("-inf")

    def request(self, statement: str) -> None:
        """Ask for ``notify_run_wakeups`` or ``notify_outbox`` to be sent soon."""
        with self._condition:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="flowforge-notifier", daemon=True
                )
                self._thread.start()
            # Only the first request of a NOTIFY wakes the thread: one made while it
            # waits out the interval goes with that NOTIFY anyway, and waking it for
            # each would cost the committing process a thread switch per commit.
            if not self._pending:
                self._condition.notify()
            self._pending.add(statement)

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _next(self) -> set[str] | None:
        """The requests to send; None once closed with nothing left to send (a short
        process, e.g. ``flowforge runs start``, still wakes the scheduler on its way out)."""
        with self._condition:
            while not self._pending and not self._closed:
                self._condition.wait()
            # A close sends what is left at once: the process is on its way out.
            while not self._closed:
                wait = self._last_sent + self._min_interval_s - time.monotonic()
                if wait <= 0:
                    break
                self._condition.wait(wait)
            if not self._pending:
                return None
            pending, self._pending = self._pending, set()
            self._last_sent = time.monotonic()
            return pending

    def _run(self) -> None:
        sql = statements.load("postgres")
        conn: psycopg.Connection[Any] | None = None
        try:
            while (pending := self._next()) is not None:
                try:
                    if conn is None or conn.closed:
                        conn = self._connect()
                    # One transaction for every channel: one commit.
                    notifies = [sql[name] for name in sorted(pending)]
                    block = [sql["notify_begin"], *notifies, sql["notify_commit"]]
                    conn.execute("\n".join(block))
                except psycopg.Error as exc:
                    log.warning(
                        "wake-up notification not sent; the periodic pass covers",
                        extra={"error": str(exc).strip().splitlines()[0:1]},
                    )
                    if conn is not None:  # its transaction may be left open: start afresh
                        conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()


class InProcessOnly:
    """The notifier and the listener of a backend with no notifications (SQLite: one
    process, whose own commits ring its bells through the store): nothing to send,
    nothing to hear. The one place that says the embedded backend lacks them."""

    def request(self, statement: str) -> None:
        pass

    def wait_listening(self, timeout: float) -> bool:
        return True  # every commit that can ring a bell here is this process's own

    def close(self) -> None:
        pass
