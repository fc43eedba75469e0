"""How a command's process ends when a stop abandoned threads still running a task.

An abandoned thread (``run``/``demo`` after ``--grace``, see
:mod:`flowforge.cli.stopping`) is a daemon still inside a task and holding the
database's connections. The interpreter's finalization tears those down under it, and
a daemon thread inside a C extension (sqlite3) at finalization can crash the process
with SIGSEGV after everything was printed: the exit code would lie. So such a process
flushes its output and ends at once, as the abandoned task's lease already assumes.

Standard library only: ``flowforge.cli.main`` imports it before any command runs.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

#: Set once a stop abandoned a thread still running a task.
_abandoned = threading.Event()


def abandoned_threads() -> None:
    """Record that this process left threads running: it must not end as usual."""
    _abandoned.set()


def end_process(code: int) -> int:
    """``code``; or, if threads were abandoned, end the process here with it."""
    if not _abandoned.is_set():
        return code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
