"""Each attempt's own output: what its handler prints (``sys.stdout``, ``sys.stderr``)
and logs (``logging`` records) while it runs, in its thread, kept apart from every other
task's and from the worker's own lines (docs/logs.md).

Python has one ``sys.stdout`` per process and a worker runs its handlers on threads, so
the redirection is by thread: :func:`install` puts a proxy in front of each stream once
per process, and a logging handler on the root logger. The proxy writes to the buffer of
the attempt running in the calling thread when there is one (:func:`capturing`), and to
the real stream otherwise; the logging handler appends the thread's records and ignores
every other record before taking any lock. Outside a handler (the worker's own lines, a
CLI's output) the cost is one thread-local look-up per write.

What is not captured: output of threads or processes a handler starts itself (they have
no attempt), and records below ``CAPTURE_LEVEL`` (INFO) or below a level their logger
sets itself. So that a handler's INFO records are captured in a process that logs only
warnings (``flowforge run``'s default), :func:`install` lowers the root logger to INFO
and gives each of its handlers the level the root logger had: what they print is
unchanged.

An attempt keeps at most ``MAX_OUTPUT_CHARS`` characters: its first ``HEAD_CHARS`` and
its last ``TAIL_CHARS`` (the end is where a failure explains itself); what is dropped
between them is counted and said in the stored text, where it was dropped.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

#: The most an attempt keeps of its output, in characters: its first HEAD_CHARS and its
#: last TAIL_CHARS. 64 Ki: a few hundred log lines, a traceback whole; a row of this size
#: is one insert, however much a handler prints.
HEAD_CHARS = 48 * 1024
TAIL_CHARS = 16 * 1024
MAX_OUTPUT_CHARS = HEAD_CHARS + TAIL_CHARS
#: The lowest level of a handler's records that its attempt keeps.
CAPTURE_LEVEL = logging.INFO
#: How a captured record reads: the time, level and logger, as the worker's own lines.
RECORD_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_local = threading.local()


@dataclass(frozen=True, slots=True)
class Captured:
    """An attempt's output as it is stored: the text kept (with the truncation said in
    it), and how many characters were dropped."""

    text: str
    dropped_chars: int


def truncation_notice(dropped: int) -> str:
    return (
        f"\n[flowforge: {dropped:,} characters of this attempt's output were not kept "
        f"here: an attempt keeps its first {HEAD_CHARS:,} and its last {TAIL_CHARS:,} "
        f"characters]\n"
    )


class AttemptOutput:
    """One attempt's output buffer: bounded, safe to write from the handler's thread
    while the worker reads it (an abandoned handler may still be printing)."""

    def __init__(self, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self._head: list[str] = []
        self._head_len = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_len = 0
        self._dropped = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            room = self._head_limit - self._head_len
            if room > 0:
                kept = text[:room]
                self._head.append(kept)
                self._head_len += len(kept)
                text = text[room:]
                if not text:
                    return
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail_len > self._tail_limit:
                first = self._tail[0]
                excess = self._tail_len - self._tail_limit
                if len(first) <= excess:
                    self._tail.popleft()
                    cut = len(first)
                else:
                    self._tail[0] = first[excess:]
                    cut = excess
                self._tail_len -= cut
                self._dropped += cut

    def captured(self) -> Captured | None:
        """What to store; None if the attempt wrote nothing (nothing is stored then)."""
        with self._lock:
            if not self._head_len:
                return None
            middle = truncation_notice(self._dropped) if self._dropped else ""
            text = "".join(self._head) + middle + "".join(self._tail)
            return Captured(text, self._dropped)


def current() -> AttemptOutput | None:
    """The buffer of the attempt running in this thread, if any."""
    output: AttemptOutput | None = getattr(_local, "output", None)
    return output


@contextmanager
def capturing(output: AttemptOutput) -> Iterator[AttemptOutput]:
    """Send this thread's prints and log records to ``output`` meanwhile."""
    before = current()
    _local.output = output
    try:
        yield output
    finally:
        _local.output = before


class _ThreadStream:
    """``sys.stdout`` or ``sys.stderr``: the calling thread's attempt, else the stream
    that was there."""

    def __init__(self, real: TextIO) -> None:
        self._real = real

    def write(self, text: str) -> int:
        output = current()
        if output is None:
            return self._real.write(text)
        output.write(text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if current() is None:
            self._real.flush()

    def __getattr__(self, name: str) -> Any:
        # Everything else (fileno, encoding, isatty, buffer) is the real stream's.
        return getattr(self._real, name)


class _RecordFormatter(logging.Formatter):
    """A record as the worker's own text lines read: UTC time to the millisecond."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        moment = datetime.fromtimestamp(record.created, UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _AttemptRecords(logging.Handler):
    """Appends the records of a thread that runs an attempt to its buffer."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(_RecordFormatter(RECORD_FORMAT))

    def handle(self, record: logging.LogRecord) -> bool:
        # Before Handler.handle takes its lock: every other record of the process (the
        # worker's own lines) passes here, and must cost only this look-up.
        if current() is None:
            return False
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        output = current()
        if output is None:
            return
        try:
            output.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - a record that cannot be formatted: logging's way
            self.handleError(record)


_install_lock = threading.Lock()


def install() -> None:
    """Put the thread proxies in front of ``sys.stdout`` and ``sys.stderr`` and the
    records' handler on the root logger; idempotent (a process does it once, and again
    only where someone replaced a stream since)."""
    with _install_lock:
        if not isinstance(sys.stdout, _ThreadStream):
            sys.stdout = _ThreadStream(sys.stdout)
        if not isinstance(sys.stderr, _ThreadStream):
            sys.stderr = _ThreadStream(sys.stderr)
        root = logging.getLogger()
        if not any(isinstance(h, _AttemptRecords) for h in root.handlers):
            root.addHandler(_AttemptRecords())
        if root.level > CAPTURE_LEVEL:
            for handler in root.handlers:
                # Only a handler that takes its level from the root's: one with a level
                # of its own (pytest's caplog, an embedding program's) is left as set.
                if not isinstance(handler, _AttemptRecords) and handler.level == logging.NOTSET:
                    handler.setLevel(root.level)
            root.setLevel(CAPTURE_LEVEL)
