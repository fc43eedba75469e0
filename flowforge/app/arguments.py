"""The commands' argument checks: bad input is a clear error, before any I/O."""

from __future__ import annotations

from typing import TypeVar

from flowforge.aggregates import json_values

# The upper bounds keep a value inside the database's interval range (PostgreSQL's ends
# near 178 million years, SQLite's arithmetic at 2**63 microseconds): past them the
# error would come from the driver, after I/O began.


def positive(value: float, name: str, maximum: float) -> float:
    if not 0 < value <= maximum:
        raise ValueError(f"{name} must be > 0 and <= {maximum:g} seconds, got {value!r}")
    return float(value)


def non_negative(value: float, name: str, maximum: float) -> float:
    if not 0 <= value <= maximum:
        raise ValueError(f"{name} must be >= 0 and <= {maximum:g} seconds, got {value!r}")
    return float(value)


_Text = TypeVar("_Text", str, str | None)


def text(value: _Text, name: str) -> _Text:
    """``value`` if it is valid Unicode (no lone surrogate, which no database stores)."""
    if value is not None and (problem := json_values.unicode_problem(value)):
        raise ValueError(f"{name}: {problem}")
    return value
