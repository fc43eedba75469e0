"""Bounds on the sizes a caller asks for, shared by the API and the CLI (stdlib only, so
``flowforge --help`` stays fast)."""

from __future__ import annotations

#: Rows a listing or a publisher's batch reads at once.
MAX_ROWS = 100_000


def row_limit(value: int, name: str = "limit") -> int:
    """``value`` if it is a whole number of rows from 1 to :data:`MAX_ROWS`; else a
    ValueError naming the argument (before any I/O: a negative LIMIT is a driver error
    on PostgreSQL and means "no limit" on SQLite)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROWS:
        raise ValueError(f"{name} must be a whole number from 1 to {MAX_ROWS:,}, got {value!r}")
    return value
