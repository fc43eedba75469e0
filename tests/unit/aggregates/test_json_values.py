"""User JSON checked before it reaches an event or a row (pure)."""

from __future__ import annotations

import pytest

from flowforge.aggregates.json_values import checked_json, error_details


def test_an_error_always_carries_type_message_and_traceback() -> None:
    assert error_details({"type": "E", "message": "m"}) == {
        "traceback": "",
        "type": "E",
        "message": "m",
    }
    with pytest.raises(ValueError, match="missing \\['message'\\]"):
        error_details({"type": "E"})


def test_a_nul_in_an_error_is_written_as_an_escape() -> None:
    details = error_details({"type": "E", "message": "a\x00b", "k\x00ey": "v"})
    assert details["message"] == "a\\x00b" and details["k\\x00ey"] == "v"
    assert not any("\x00" in key + value for key, value in details.items())


def test_an_error_text_that_is_not_unicode_is_made_storable_not_refused() -> None:
    details = error_details({"type": "E", "message": "bad \udcff name"})
    assert details["message"] == "bad \\udcff name"


def test_a_result_that_is_not_json_is_refused_with_what_it_is() -> None:
    with pytest.raises(ValueError, match="result must be JSON"):
        checked_json(float("nan"), "result")
    assert checked_json((1, "a"), "result") == [1, "a"]
