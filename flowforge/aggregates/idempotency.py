"""An idempotency key names one submission: the same key with the same workflow and
inputs returns the run it made; with others, it is refused, naming what differs (as
Stripe refuses a key reused with other parameters). Silently returning the old run
would run the old inputs while the caller believes its new ones were taken.

Pure: it compares what the run stored with what is submitted now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Input keys named in a conflict's message, at most.
SHOWN_KEYS = 5


def conflict(
    stored_definition: Mapping[str, Any],
    stored_inputs: Mapping[str, Any],
    definition: Mapping[str, Any],
    inputs: Mapping[str, Any],
) -> str | None:
    """What differs between a run's submission and this one (None: nothing)."""
    problems = []
    if stored_definition != definition:
        problems.append(_definition_difference(stored_definition, definition))
    if stored_inputs != inputs:
        problems.append(_input_difference(stored_inputs, inputs))
    return "; ".join(problems) or None


def _definition_difference(stored: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    if stored.get("name") != new.get("name"):
        return f"the workflow is {new.get('name')!r}, not {stored.get('name')!r}"
    fields = sorted(k for k in stored.keys() | new.keys() if stored.get(k) != new.get(k))
    return f"the workflow {new.get('name')!r} differs (in {', '.join(fields)})"


def _input_difference(stored: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    added = sorted(new.keys() - stored.keys())
    removed = sorted(stored.keys() - new.keys())
    changed = sorted(k for k in stored.keys() & new.keys() if stored[k] != new[k])
    parts = [
        f"{label} {', '.join(keys[:SHOWN_KEYS])}{' ...' if len(keys) > SHOWN_KEYS else ''}"
        for label, keys in (("changed", changed), ("added", added), ("removed", removed))
        if keys
    ]
    return f"the inputs differ ({'; '.join(parts)})"
