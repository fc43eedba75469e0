"""Bounds on the sizes a caller asks for, shared by the API and the CLI (stdlib only, so
``flowforge --help`` stays fast)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

_Id = TypeVar("_Id", bound=Hashable)

#: Rows a listing or a publisher's batch reads at once.
MAX_ROWS = 100_000
#: Tasks one batched claim or finish takes: one transaction, one round trip.
MAX_BATCH = 1_000


def row_limit(value: int, name: str = "limit") -> int:
    """``value`` if it is a whole number of rows from 1 to :data:`MAX_ROWS`; else a
    ValueError naming the argument (before any I/O: a negative LIMIT is a driver error
    on PostgreSQL and means "no limit" on SQLite)."""
    return _whole_number(value, name, MAX_ROWS)


def batch_size(value: int, name: str) -> int:
    """``value`` if it is a whole number of tasks from 1 to :data:`MAX_BATCH` (a
    consumer's prefetch, a worker's batch); else a ValueError naming the argument."""
    return _whole_number(value, name, MAX_BATCH)


def _whole_number(value: int, name: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"{name} must be a whole number from 1 to {maximum:,}, got {value!r}")
    return value


def batch_of_ids(ids: Sequence[_Id], name: str) -> list[_Id]:
    """``ids`` as a list if they are 1 to :data:`MAX_BATCH` distinct ids; else a
    ValueError naming the argument and the problem (before any I/O)."""
    batch = list(ids)
    if not 1 <= len(batch) <= MAX_BATCH:
        raise ValueError(f"{name} must hold 1 to {MAX_BATCH:,} ids, got {len(batch):,}")
    if len(set(batch)) != len(batch):
        repeated = sorted({str(i) for i in batch if batch.count(i) > 1})
        raise ValueError(f"{name} must be distinct; repeated: {', '.join(repeated)}")
    return batch
