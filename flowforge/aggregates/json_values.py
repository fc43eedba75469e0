"""User JSON (results, inputs, errors): checked once, before it reaches an event or a row.

A value that cannot be stored exactly — not JSON, NaN or infinity, or text that is not
valid Unicode (a lone surrogate, as ``str()`` of an ``OSError`` about a non-UTF-8 file
name holds) — is refused with a ``ValueError`` naming what and why, before any write.
An error's text is never refused, only made storable: a worker cannot change the message
of the exception it caught.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: The deepest nesting of lists and objects a stored value (a definition, inputs, a
#: result) may have. Far more than any real document; it keeps every reader of it (this
#: process's JSON and TOML parsers, the databases' JSON functions) away from its own
#: recursion limit, which would fail with a RecursionError instead of a clear message.
MAX_NESTING = 100


def nesting_problem(value: Any, limit: int = MAX_NESTING) -> str | None:
    """Why ``value`` is nested too deeply to store, or None (iterative: any depth)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item
        if not isinstance(item, Mapping | list | tuple):
            continue
        if depth > limit:
            return f"nested more than {limit} levels deep (lists and objects within each other)"
        stack.extend((child, depth + 1) for child in children)
    return None


_SCALARS = (str, int, float, bool, type(None))


def first_unstorable(value: Any) -> tuple[str, str] | None:
    """Where in ``value`` the first part that cannot be stored is, and why: a path
    such as ``["rows"][2]`` (``""`` for the value itself) and the problem, e.g.
    ``a set, not JSON``; None if every part can be stored."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        problem = _own_problem(item)
        if problem is not None:
            return path, problem
        if isinstance(item, Mapping):
            for key in reversed(list(item)):
                stack.append((item[key], f"{path}[{key!r}]"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None


def _own_problem(item: Any) -> str | None:
    """Why this one value (not its children) cannot be stored, or None."""
    if isinstance(item, float) and not math.isfinite(item):
        return f"{item!r} is not a finite number"
    if isinstance(item, str):
        return unicode_problem(item)
    if isinstance(item, Mapping):
        keys = [k for k in item if not isinstance(k, str)]
        return f"a key that is not a string ({keys[0]!r})" if keys else None
    if isinstance(item, (list, tuple, *_SCALARS)):
        return None
    return f"{type(item).__name__!r} is not JSON"


def checked_json(value: Any, what: str) -> Any:
    """``value`` as stored and read back (tuples become lists), or a clear ValueError."""
    if problem := nesting_problem(value):
        raise ValueError(f"{what} is {problem}; FlowForge stores at most {MAX_NESTING}")
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
