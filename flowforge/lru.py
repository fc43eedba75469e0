"""A bounded map that drops its least recently used entry: the caches on the claim and
finish paths (parsed definitions, claimed rows, a worker's runs, kept outcomes).

A thin skin over ``OrderedDict`` (its C methods do the work, one call per operation),
because these caches are touched once per task. Not thread-safe: a cache shared between
threads holds its own lock around each call.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``size`` entries; putting one more drops the least recently used.

    Values are never ``None``: ``None`` is what a missing key reads as.
    """

    __slots__ = ("_entries", "_size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self._size = size
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: K) -> V | None:
        """The value of ``key``, leaving its recency as it is."""
        return self._entries.get(key)

    def get(self, key: K) -> V | None:
        """The value of ``key``, which becomes the most recently used."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Set ``key`` (now the most recently used), dropping the least recently used
        entry if that makes one too many."""
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        if len(entries) > self._size:
            entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or ``None`` if it was not here."""
        return self._entries.pop(key, None)

    def latest(self, count: int) -> list[K]:
        """The ``count`` most recently used keys, the most recent first."""
        return list(islice(reversed(self._entries), count))
