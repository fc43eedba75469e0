"""The cyclic garbage collector paused around a bulk decode of the log (``db rebuild``,
its verification, ``history`` of a big run)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (process-wide: other
    threads' cycles wait for the block's end to be collected; reference counting
    frees everything else as always). Decoding
    the log makes tens of thousands of small objects, none in a cycle, and the
    collections their allocations set off (each walking every object alive) were about
    40 % of decoding the events (docs/performance.md, "Archive, restore and
    rebuild")."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
