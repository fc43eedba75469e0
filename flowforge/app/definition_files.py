"""Workflow definitions from files: reading TOML or JSON from disk, naming the file in
every error.

The pure core (:mod:`flowforge.aggregates.definition`) validates a mapping; this module
is the I/O in front of it, so ``aggregates`` never opens a file.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from flowforge.aggregates.definition import WorkflowDefinition, parse_definition
from flowforge.aggregates.json_values import MAX_NESTING, nesting_problem
from flowforge.errors import InvalidWorkflowDefinitionError

Source = WorkflowDefinition | Mapping[str, Any] | str | os.PathLike[str]

_PARSERS: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    ".toml": ("TOML", tomllib.loads),
    ".json": ("JSON", json.loads),
}


def load_definition(source: Source) -> WorkflowDefinition:
    """A validated definition from a definition, a mapping, or a ``.toml``/``.json`` path.

    Every failure is an ``InvalidWorkflowDefinitionError``, one line per problem, each
    naming the file (if any) and the field path.
    """
    if isinstance(source, WorkflowDefinition):
        return source
    if isinstance(source, Mapping):
        return parse_definition(source)
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        language, parse = _file_format(path)
        return parse_definition(_parse(path, language, parse, _read_file(path)), origin=path)
    raise InvalidWorkflowDefinitionError(
        "expected a WorkflowDefinition, a mapping or the path of a .toml or .json file, "
        f"got {type(source).__name__}"
    )


def load_definition_text(text: str, file_type: str, *, origin: str) -> WorkflowDefinition:
    """A validated definition from the text of a ``.toml`` or ``.json`` file (``file_type``:
    ``"toml"`` or ``"json"``) that did not come from disk (a form's), its errors named
    after ``origin`` as a file's are after its path."""
    if f".{file_type.lower()}" not in _PARSERS:
        raise InvalidWorkflowDefinitionError(
            f"{origin}: {file_type!r} is not a workflow file's format: use toml or json"
        )
    language, parse = _PARSERS[f".{file_type.lower()}"]
    text = text.removeprefix("\ufeff")  # a byte-order mark, read past as in a file
    return parse_definition(_parse(origin, language, parse, text), origin=origin)


def _file_format(path: str) -> tuple[str, Callable[[str], Any]]:
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in _PARSERS:
        raise InvalidWorkflowDefinitionError(
            f"{path}: unsupported file type {suffix or '(no suffix)'!r}: use .toml or .json"
        )
    return _PARSERS[suffix.lower()]


def _read_file(path: str) -> str:
    """The file's text, or an error naming the file and what is wrong with it."""
    try:
        # utf-8-sig: a byte-order mark some editors write is read past, not an error.
        with open(path, encoding="utf-8-sig") as file:
            return file.read()
    except FileNotFoundError as exc:
        raise InvalidWorkflowDefinitionError(f"{path}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise InvalidWorkflowDefinitionError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc
    except OSError as exc:
        raise InvalidWorkflowDefinitionError(
            f"{path}: cannot read the file: {exc.strerror or exc}"
        ) from exc


def _parse(path: str, language: str, parse: Callable[[str], Any], text: str) -> Mapping[str, Any]:
    try:
        data = parse(text)
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError; both name the line
        raise InvalidWorkflowDefinitionError(f"{path}: invalid {language}: {exc}") from exc
    except RecursionError as exc:  # the parsers recurse once per level of nesting
        raise InvalidWorkflowDefinitionError(
            f"{path}: nested too deeply to read (lists and tables within each other, "
            f"at most {MAX_NESTING} levels)"
        ) from exc
    if problem := nesting_problem(data):
        raise InvalidWorkflowDefinitionError(f"{path}: {problem}; at most {MAX_NESTING}")
    if not isinstance(data, dict):
        raise InvalidWorkflowDefinitionError(
            f"{path}: the top level must be a {language} object, got {type(data).__name__}"
        )
    return data
