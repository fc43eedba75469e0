"""User JSON (results, inputs, errors): checked once, before it reaches an event or a row.

A value that cannot be stored exactly — not JSON, NaN or infinity, or text that is not
valid Unicode (a lone surrogate, as ``str()`` of an ``OSError`` about a non-UTF-8 file
name holds) — is refused with a ``ValueError`` naming what and why, before any write.
An error's text is never refused, only made storable: a worker cannot change the message
of the exception it caught.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def checked_json(value: Any, what: str) -> Any:
    """``value`` as stored and read back (tuples become lists), or a clear ValueError."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what} must be JSON (dicts with string keys, lists, strings, finite numbers, "
            f"booleans, None) in valid Unicode: {exc}"
        ) from exc
    return json.loads(text)


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None: a lone surrogate is not valid Unicode
    (it is how Python passes on bytes that are not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"not valid Unicode text ({exc.reason} at character {exc.start}: "
            f"{text[exc.start]!r}); no database can store it"
        )
    return None


def storable_text(text: str) -> str:
    """``text`` with anything that is not valid Unicode written as an escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_details(error: Mapping[str, object]) -> dict[str, str]:
    """A failure as the audit log records it: ``type``, ``message``, ``traceback``.
    Its text is made storable, and a NUL in it is written as ``\\x00``: every later
    event of the task carries the error, and PostgreSQL, where it builds those events
    (projections/event_sql.py), cannot read a JSON document holding a NUL."""
    missing = {"type", "message"} - error.keys()
    if missing:
        raise ValueError(f"error must carry 'type' and 'message' (missing {sorted(missing)})")
    details = {"traceback": "", **{str(k): str(v) for k, v in error.items()}}
    return {_error_text(key): _error_text(value) for key, value in details.items()}


def _error_text(text: str) -> str:
    return storable_text(text).replace("\x00", "\\x00")
