"""The bounded LRU map behind the claim and finish paths' caches (flowforge/lru.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge.lru import Lru


def test_putting_one_more_than_the_size_drops_the_least_recently_put() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert len(cache) == 2
    assert cache.peek("a") is None
    assert (cache.peek("b"), cache.peek("c")) == (2, 3)


def test_a_get_makes_its_key_the_most_recently_used() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.peek("b") is None
    assert cache.latest(2) == ["c", "a"]


def test_a_peek_leaves_the_recency_as_it_is() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    cache.put("c", 3)
    assert cache.peek("a") is None


def test_putting_a_key_again_replaces_its_value_and_makes_it_the_most_recent() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert (cache.peek("a"), cache.peek("b"), len(cache)) == (10, None, 2)


def test_a_pop_removes_the_key_and_a_missing_key_reads_as_none() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    assert cache.pop("a") == 1
    assert cache.pop("a") is None
    assert (cache.get("a"), len(cache)) == (None, 0)


def test_latest_names_at_most_count_keys_most_recent_first() -> None:
    cache: Lru[int, int] = Lru(10)
    for key in range(5):
        cache.put(key, key)
    assert cache.latest(3) == [4, 3, 2]
    assert cache.latest(8) == [4, 3, 2, 1, 0]


def test_a_size_below_one_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        Lru(0)


#: An operation on a small key space, so that keys repeat and entries are dropped.
_OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["put", "get", "peek", "pop"]), st.integers(0, 6)),
    max_size=60,
)


@given(size=st.integers(1, 5), operations=_OPERATIONS)
def test_it_agrees_with_a_list_kept_in_order_of_use(
    size: int, operations: list[tuple[str, int]]
) -> None:
    cache: Lru[int, int] = Lru(size)
    model: list[tuple[int, int]] = []  # least recently used first
    for step, (operation, key) in enumerate(operations):
        found = next((value for k, value in model if k == key), None)
        if operation == "put":
            model = [(k, v) for k, v in model if k != key] + [(key, step)]
            model = model[-size:]
            cache.put(key, step)
        elif operation == "get":
            assert cache.get(key) == found
            if found is not None:
                model = [(k, v) for k, v in model if k != key] + [(key, found)]
        elif operation == "peek":
            assert cache.peek(key) == found
        else:
            assert cache.pop(key) == found
            model = [(k, v) for k, v in model if k != key]
        assert len(cache) == len(model) <= size
    assert cache.latest(size) == [k for k, _ in reversed(model)]
