"""New ids are UUIDv7 (RFC 9562): their time first, so later ids sort after earlier ones."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowforge.aggregates.ids import RANDOM_BYTES, new_id, uuid7

MILLISECONDS = st.integers(min_value=0, max_value=(1 << 48) - 1)
RANDOM = st.binary(min_size=RANDOM_BYTES, max_size=RANDOM_BYTES)


@given(MILLISECONDS, RANDOM)
def test_a_uuid7_carries_its_time_version_and_variant(unix_ms: int, random: bytes) -> None:
    made = uuid7(unix_ms, random)
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert made.int >> 80 == unix_ms


@given(MILLISECONDS, RANDOM, RANDOM)
def test_the_random_bits_are_kept(unix_ms: int, one: bytes, other: bytes) -> None:
    # 74 of the 80 random bits survive (6 make way for the version and variant).
    assert (uuid7(unix_ms, one) == uuid7(unix_ms, other)) == (_kept(one) == _kept(other))


def _kept(random: bytes) -> int:
    rand = int.from_bytes(random, "big")
    return ((rand >> 62) & 0xFFF) << 62 | (rand & ((1 << 62) - 1))


@given(MILLISECONDS, MILLISECONDS, RANDOM, RANDOM)
def test_a_later_millisecond_sorts_after_an_earlier_one(
    first: int, second: int, one: bytes, other: bytes
) -> None:
    if first < second:
        assert uuid7(first, one) < uuid7(second, other)


@pytest.mark.parametrize(
    ("unix_ms", "random", "problem"),
    [
        (-1, bytes(RANDOM_BYTES), "48 bits of milliseconds"),
        (1 << 48, bytes(RANDOM_BYTES), "48 bits of milliseconds"),
        (0, bytes(RANDOM_BYTES - 1), "10 random bytes"),
    ],
)
def test_a_time_or_randomness_out_of_range_is_refused(
    unix_ms: int, random: bytes, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        uuid7(unix_ms, random)


def test_new_ids_are_of_now_unique_and_in_the_order_of_their_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    made = [new_id() for _ in range(10_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(made)) == len(made)
    assert all(before <= m.int >> 80 <= after for m in made)
    times = [m.int >> 80 for m in made]
    assert times == sorted(times)
