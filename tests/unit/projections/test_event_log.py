"""The event log's transcoder gives back every user JSON value exactly, look-alikes of
the library's own encoding included, at any depth (``projections/event_log.py``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flowforge.projections.event_log import UserSafeJSONTranscoder

#: Keys that make a user dict look like the library's encoding, beside ordinary ones.
KEYS = st.sampled_from(["_type_", "_data_", "a", "b"])
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=20,
)
#: The library's own encoded shapes, as a user could write them.
LOOK_ALIKES = st.builds(
    lambda name, data: {"_type_": name, "_data_": data},
    st.sampled_from(["uuid_hex", "datetime_iso", "decimal_str", "flowforge_dict", "csv"]),
    JSON,
)


@given(st.dictionaries(st.text(max_size=5), JSON | LOOK_ALIKES, max_size=4))
def test_any_user_json_comes_back_exactly(state: dict[str, Any]) -> None:
    transcoder = UserSafeJSONTranscoder()
    assert transcoder.decode(transcoder.encode(state)) == state


@given(LOOK_ALIKES, st.integers(min_value=0, max_value=3))
def test_a_look_alike_nested_in_lists_and_dicts_comes_back_exactly(
    look_alike: dict[str, Any], depth: int
) -> None:
    value: Any = look_alike
    for level in range(depth):
        value = [value] if level % 2 else {"inner": value}
    transcoder = UserSafeJSONTranscoder()
    assert transcoder.decode(transcoder.encode({"result": value})) == {"result": value}
