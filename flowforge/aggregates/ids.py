"""The ids FlowForge gives new runs, task runs and dispatches: time-ordered UUIDs.

A UUID version 7 (RFC 9562) starts with its creation time in milliseconds and ends in 74
random bits. Ids made later sort after ids made earlier (within one millisecond, in any
order), so each new row's index entries land at the right-hand edge of every B-tree
that starts with an id (the tables' primary keys, the event log's
``(originator_id, originator_version)``, a task's run id) instead of on a random page:
PostgreSQL inserts there without descending the tree and keeps the recently written
pages few and hot, where random UUIDs scatter writes over the whole index (and over
disk, once the index outgrows memory). Still unguessable in practice and unique: 74
random bits per millisecond.
"""

from __future__ import annotations

import os
import time
from uuid import UUID

#: The RFC 9562 version and variant bits of a UUIDv7.
_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62
_RAND_A_BITS = 12
_RAND_B_BITS = 62
RANDOM_BYTES = 10
_MAX_MILLISECONDS = (1 << 48) - 1


def uuid7(unix_ms: int, random_bytes: bytes) -> UUID:
    """The UUIDv7 of a time (milliseconds since the Unix epoch) and 10 random bytes."""
    if not 0 <= unix_ms <= _MAX_MILLISECONDS:
        raise ValueError(f"a UUIDv7's time is 48 bits of milliseconds, not {unix_ms}")
    if len(random_bytes) != RANDOM_BYTES:
        raise ValueError(f"a UUIDv7 takes {RANDOM_BYTES} random bytes, not {len(random_bytes)}")
    rand = int.from_bytes(random_bytes, "big")
    rand_a = (rand >> _RAND_B_BITS) & ((1 << _RAND_A_BITS) - 1)
    rand_b = rand & ((1 << _RAND_B_BITS) - 1)
    return UUID(int=(unix_ms << 80) | _VERSION_7 | (rand_a << 64) | _VARIANT_RFC | rand_b)


#: Hex digits of an id's short form: its last ones, which are random. Its first ones are
#: its creation time, shared by every id made within the same few minutes, so a prefix
#: tells recent runs apart only when it is long. 32 random bits: two of a thousand recent
#: runs share a short id about once in eight thousand such thousands.
SHORT_ID_DIGITS = 8


def short_id(full: UUID) -> str:
    """The short form of an id that FlowForge prints: its last :data:`SHORT_ID_DIGITS`
    hex digits (random), which the CLI takes back wherever it takes an id."""
    return full.hex[-SHORT_ID_DIGITS:]


def new_id() -> UUID:
    """A new id: a UUIDv7 of now, with the operating system's randomness."""
    return uuid7(time.time_ns() // 1_000_000, os.urandom(RANDOM_BYTES))
