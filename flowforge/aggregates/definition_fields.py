"""The field types of a workflow definition (``definition.py``): identifiers and text,
and the validation error whose message is exactly its lines.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from flowforge.aggregates import json_values


def problem(*lines: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``lines``, one problem per line.

    A plain ``ValueError`` would be shown as "Value error, ..."; this keeps the text
    the same whether it reaches the user through pydantic or ``parse_definition``.
    """
    return PydanticCustomError(
        "invalid_workflow_definition", "{detail}", {"detail": "\n".join(lines)}
    )


def _plain_identifier(value: str) -> str:
    if not value.isidentifier():
        raise problem(
            f"{value!r} is not a plain identifier "
            "(letters, digits and underscores, not starting with a digit)"
        )
    return value


def _valid_unicode(value: str) -> str:
    if found := json_values.unicode_problem(value):
        raise problem(found)
    return value


#: Any text of a definition: stored as it is, so it must be valid Unicode.
Text = Annotated[str, AfterValidator(_valid_unicode)]
#: Keys, types and names end up in log lines, queue routing and CLI arguments.
Identifier = Annotated[str, AfterValidator(_valid_unicode), AfterValidator(_plain_identifier)]
