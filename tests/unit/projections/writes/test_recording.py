"""The stand-in for a PostgreSQL transaction's clock in a creation event's stored state
(``projector.TRANSACTION_NOW``): the state is cut around the time in its one stamp, and
SQL writes now() in between (tests/integration/projections/test_event_sql.py)."""

from __future__ import annotations

import pytest

from flowforge.projections.projector import TRANSACTION_NOW, row_time
from flowforge.projections.writes.recording import around_transaction_now

TIME = f'"{TRANSACTION_NOW.isoformat()}"'.encode()
STAMP = b'{"_type_":"datetime_iso","_data_":' + TIME + b"}"


def test_a_state_is_cut_around_the_time_in_its_stamp() -> None:
    state = b'{"timestamp":' + STAMP + b',"inputs":{"s":' + TIME + b"}}"
    head, tail = around_transaction_now(state, STAMP)
    assert head == b'{"timestamp":{"_type_":"datetime_iso","_data_":'
    assert tail == b'},"inputs":{"s":' + TIME + b"}}"  # a user's string of it is kept


@pytest.mark.parametrize("state", [b'{"s":' + TIME + b"}", b"[" + STAMP + b"," + STAMP + b"]"])
def test_a_state_without_exactly_one_stamp_is_refused(state: bytes) -> None:
    with pytest.raises(ValueError, match="exactly once"):
        around_transaction_now(state, STAMP)


def test_a_stamp_without_the_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no time in it"):
        around_transaction_now(b"[1]", b"1")


def test_a_row_takes_the_transaction_clock_as_null() -> None:
    assert row_time(TRANSACTION_NOW) is None
    later = TRANSACTION_NOW.replace(year=2026)
    assert row_time(later) == later
