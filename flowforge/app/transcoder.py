"""The event log's JSON transcoder, safe for any user JSON.

The ``eventsourcing`` library encodes a non-JSON value as ``{"_type_": name, "_data_":
...}`` and, when reading, turns EVERY two-key object of that shape back into a value —
including one that was a user's result or input. Such a user object would come back as
something else, or fail to decode and make its aggregate unreadable. This transcoder
escapes it on the way in (as a list of pairs, which the decoder leaves alone), so every
user value comes back from the log exactly as it went in.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

#: The keys of the library's own encoding.
_RESERVED = frozenset({"_type_", "_data_"})


class _LookAlike:
    """A user dict with exactly the library's reserved keys."""

    __slots__ = ("items",)

    def __init__(self, items: dict[str, Any]) -> None:
        self.items = items


class _LookAlikeAsPairs(Transcoding):
    type = _LookAlike
    name = "flowforge_dict"

    def encode(self, obj: _LookAlike) -> list[list[Any]]:
        return [[key, value] for key, value in obj.items.items()]

    def decode(self, data: list[list[Any]]) -> dict[str, Any]:
        return dict(data)


#: What ``_escape`` walks into; anything else is a leaf, kept as it is.
_CONTAINERS = (dict, list, tuple)


def _escape(value: Any) -> Any:
    """``value`` with every dict of exactly the reserved keys wrapped, at any depth. It
    walks every event's whole state (a run's definition included), so a leaf is kept
    without a call: about half the calls, most of them on scalars, went."""
    if isinstance(value, dict):
        escaped = {
            key: _escape(item) if isinstance(item, _CONTAINERS) else item
            for key, item in value.items()
        }
        return _LookAlike(escaped) if escaped.keys() == _RESERVED else escaped
    if isinstance(value, list | tuple):
        return [_escape(item) if isinstance(item, _CONTAINERS) else item for item in value]
    return value


class UserSafeJSONTranscoder(JSONTranscoder):
    """The library's JSON transcoder, with user look-alikes escaped."""

    def __init__(self) -> None:
        super().__init__()
        self.register(_LookAlikeAsPairs())

    def encode(self, obj: Any) -> bytes:
        return super().encode(_escape(obj))
