"""Structured log lines on stderr: a stable message, then the record's fields as key=value.

``log.info("task finished", extra={"task_run_id": ..., "attempt": 2})`` becomes::

    2026-01-31T12:03:04.123Z INFO flowforge.processes.worker: task finished attempt=2 ...

One line per record, so ``grep task_run_id=...`` finds a task's whole story across
processes; only an exception's traceback spans lines.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

#: The attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
#: Libraries that log what FlowForge translates and logs itself (pika logs every failed
#: connect at ERROR, with a traceback): their records show only with DEBUG.
_QUIET_LIBRARIES = ("pika", "eventsourcing", "psycopg", "psycopg.pool")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class StructuredFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message> key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields = " ".join(
            f"{key}={_value(value)}"
            for key, value in record.__dict__.items()
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
        )
        line = f"{at.replace('+00:00', 'Z')} {record.levelname} {record.name}: "
        line += record.getMessage() + (f" {fields}" if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _value(value: Any) -> str:
    """Bare when unambiguous, JSON-quoted when it has spaces, quotes or ``=``."""
    if isinstance(value, str):
        plain = value and not any(c in value for c in ' "=\n\t')
        return value if plain else json.dumps(value)
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def configure(level: str) -> None:
    """Send every log record at ``level`` or above to stderr, one structured line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = logging.CRITICAL if logging.getLevelName(level) > logging.DEBUG else logging.DEBUG
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
