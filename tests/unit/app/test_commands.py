"""The commands' argument checks: bad input is a clear error before any I/O (pure)."""

from __future__ import annotations

import math

import pytest

from flowforge.app import commands


@pytest.mark.parametrize("value", [0, -1.5, math.nan])
def test_a_lease_must_be_positive_and_the_error_names_it(value: float) -> None:
    with pytest.raises(ValueError, match="lease_seconds must be > 0"):
        commands.positive(value, "lease_seconds")


@pytest.mark.parametrize("value", [-0.001, math.nan])
def test_a_delay_must_not_be_negative_and_the_error_names_it(value: float) -> None:
    with pytest.raises(ValueError, match="retry_delay_seconds must be >= 0"):
        commands.non_negative(value, "retry_delay_seconds")


def test_accepted_values_come_back_as_floats() -> None:
    assert commands.positive(2, "x") == 2.0 and isinstance(commands.positive(2, "x"), float)
    assert commands.non_negative(0, "x") == 0.0
