"""A pydantic validation error in a user's words (issue #49): what the field must be,
what was given, and, for an unknown key, the closest known one.

pydantic writes ``Input should be greater than or equal to 1`` and ``Extra inputs are
not permitted``; a user editing a workflow file reads ``must be at least 1, got 0`` and
``unknown key 'depend_on'; did you mean 'depends_on'?``. Errors of a type not listed
here keep pydantic's message, without its ``Value error, `` prefix.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

#: How much of a given value a message quotes.
_SHOWN = 40


def given(value: Any) -> str:
    """A value as the file wrote it (JSON/TOML-like), cut to fit a line."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def closest(name: str, known: Collection[str]) -> str | None:
    """The known name closest to ``name``, if one is close enough to be a typo."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


def _bound(word: str, key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda ctx: f"must be {word} {ctx.get(key)}"


#: By pydantic's error type: what the value must be (the value given is appended).
_MUST: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
    "greater_than_equal": _bound("at least", "ge"),
    "greater_than": _bound("more than", "gt"),
    "less_than_equal": _bound("at most", "le"),
    "less_than": _bound("less than", "lt"),
    "int_type": lambda ctx: "must be a whole number",
    "int_parsing": lambda ctx: "must be a whole number",
    "int_from_float": lambda ctx: "must be a whole number",
    "float_type": lambda ctx: "must be a number",
    "float_parsing": lambda ctx: "must be a number",
    "finite_number": lambda ctx: "must be a finite number",
    "string_type": lambda ctx: "must be text (in quotes)",
    "bool_type": lambda ctx: "must be true or false",
    "bool_parsing": lambda ctx: "must be true or false",
    "list_type": lambda ctx: 'must be a list, e.g. ["a", "b"]',
    "tuple_type": lambda ctx: 'must be a list, e.g. ["a", "b"]',
    "dict_type": lambda ctx: "must be a table of keys",
    "model_type": lambda ctx: "must be a table of keys",
    "model_attributes_type": lambda ctx: "must be a table of keys",
    "literal_error": lambda ctx: f"must be one of {ctx.get('expected')}",
    "enum": lambda ctx: f"must be one of {ctx.get('expected')}",
    "string_too_short": lambda ctx: f"must be at least {ctx.get('min_length')} characters",
    "string_too_long": lambda ctx: f"must be at most {ctx.get('max_length')} characters",
    "too_short": lambda ctx: f"must have at least {ctx.get('min_length')} items",
    "too_long": lambda ctx: f"must have at most {ctx.get('max_length')} items",
    "string_pattern_mismatch": lambda ctx: f"must match {ctx.get('pattern')}",
}


def message(error: Mapping[str, Any], known_keys: Collection[str] = ()) -> str:
    """``error`` (one of ``ValidationError.errors()``) in a user's words, without its
    field path (the caller puts it first). ``known_keys``: the keys an unknown one is
    compared with."""
    kind = error.get("type", "")
    if kind == "missing":
        return "missing: this key is required"
    if kind == "extra_forbidden":
        loc = error.get("loc", ())
        name = str(loc[-1]) if loc else "?"
        near = closest(name, known_keys)
        hint = f"; did you mean {near!r}?" if near else ""
        return f"unknown key {name!r}{hint}"
    must = _MUST.get(kind)
    if must is None:
        text = str(error.get("msg", ""))
        return text.removeprefix("Value error, ")
    return f"{must(error.get('ctx') or {})}, got {given(error.get('input'))}"
