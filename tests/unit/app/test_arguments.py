"""The commands' argument checks: bad input is a clear error before any I/O (pure)."""

from __future__ import annotations

import math

import pytest

from flowforge.app import arguments

WEEK = 7 * 24 * 3600.0


@pytest.mark.parametrize("value", [0, -1.5, math.nan, math.inf, 1e300, WEEK + 1])
def test_a_lease_must_be_positive_and_bounded_and_the_error_names_it(value: float) -> None:
    with pytest.raises(ValueError, match="lease_seconds must be > 0 and <= 604800 seconds"):
        arguments.positive(value, "lease_seconds", WEEK)


@pytest.mark.parametrize("value", [-0.001, math.nan, math.inf, 2.0**63])
def test_a_delay_must_not_be_negative_or_unbounded_and_the_error_names_it(value: float) -> None:
    with pytest.raises(ValueError, match="retry_delay_seconds must be >= 0 and <="):
        arguments.non_negative(value, "retry_delay_seconds", WEEK)


def test_accepted_values_come_back_as_floats() -> None:
    assert arguments.positive(2, "x", WEEK) == 2.0
    assert isinstance(arguments.positive(2, "x", WEEK), float)
    assert arguments.non_negative(0, "x", WEEK) == 0.0
    assert arguments.positive(WEEK, "x", WEEK) == WEEK


@pytest.mark.parametrize("value", ["k\udcff", "\ud800"])
def test_text_that_is_not_unicode_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match=r"^actor: not valid Unicode text"):
        arguments.text(value, "actor")
    assert arguments.text(None, "actor") is None
