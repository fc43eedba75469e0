"""Structured log lines on stderr: a stable message, then the record's fields.

``log.info("task finished", extra={"task_run_id": ..., "attempt": 2})`` becomes, in the
default text format::

    2026-01-31T12:03:04.123Z INFO flowforge.processes.worker: task finished attempt=2 ...

One line per record, so ``grep task_run_id=...`` finds a task's whole story across
processes; only an exception's traceback spans lines. With ``--log-format json`` each
record is one JSON object on one line (its traceback too, in ``exception``)::

    {"time": "2026-01-31T12:03:04.123Z", "level": "INFO", "logger": "...",
     "message": "task finished", "attempt": 2, ...}

Either way a URL's password (and a libpq ``password=``) is shown as ``***``, wherever it
appears: the message, a field, a traceback (``flowforge.redaction``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from flowforge.redaction import redacted

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


FORMATS = ("text", "json")


class StructuredFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message> key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={_value(value)}" for key, value in _fields(record))
        line = f"{_time(record)} {record.levelname} {record.name}: "
        line += record.getMessage() + (f" {fields}" if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redacted(line)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message``, the record's
    fields, and ``exception`` (its traceback) if it has one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update((key, value) for key, value in _fields(record) if key not in entry)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redacted(json.dumps(entry, default=str, ensure_ascii=False))


def _fields(record: logging.LogRecord) -> list[tuple[str, Any]]:
    """What came from ``extra=``."""
    return [
        (key, value)
        for key, value in record.__dict__.items()
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
    ]


def _time(record: logging.LogRecord) -> str:
    at = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    return at.replace("+00:00", "Z")


def _value(value: Any) -> str:
    """Bare when unambiguous, JSON-quoted when it has spaces, quotes or ``=``."""
    if isinstance(value, str):
        plain = value and not any(c in value for c in ' "=\n\t')
        return value if plain else json.dumps(value)
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def configure(level: str, log_format: str = "text") -> None:
    """Send every log record at ``level`` or above to stderr, one structured line each
    (``log_format``: ``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else StructuredFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = logging.CRITICAL if logging.getLevelName(level) > logging.DEBUG else logging.DEBUG
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
