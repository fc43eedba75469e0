"""The dispatch message: what the publisher puts on the queue and the worker takes off it.

A dispatch says "task run X may be claimed now"; it carries no authority of its own. The
worker claims the task run by its id (READY -> RUNNING, which bumps the fencing token),
so a duplicate or stale dispatch claims nothing and is acked without running anything.
``fencing_token`` is the token the task run had when it was dispatched: diagnostic, not a
lease.

The wire format is compact JSON with an explicit ``schema_version``. A body that does not
decode is never guessed at: :func:`decode_dispatch` raises ``MalformedDispatchError``
saying exactly why, and the worker dead-letters the message.
"""

from __future__ import annotations

import json
from typing import Final, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flowforge import errors

#: The only wire version this FlowForge reads and writes.
DISPATCH_SCHEMA_VERSION: Final = 1

#: The fencing token is a BIGINT column; a larger value cannot have come from FlowForge.
MAX_FENCING_TOKEN: Final = 2**63 - 1


class DispatchMessage(BaseModel):
    """One task run made dispatchable: the body of one message on the dispatch queue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = DISPATCH_SCHEMA_VERSION
    dispatch_id: UUID
    task_run_id: UUID
    task_key: str = Field(min_length=1)
    task_type: str = Field(min_length=1)
    # strict: a JSON ``true`` or ``"3"`` is a malformed message, not token 1 or 3.
    fencing_token: int = Field(ge=0, le=MAX_FENCING_TOKEN, strict=True)

    def encode(self) -> bytes:
        """The message body: compact UTF-8 JSON."""
        return self.model_dump_json().encode("utf-8")


def decode_dispatch(body: bytes) -> DispatchMessage:
    """Parse a message body, or raise ``MalformedDispatchError`` saying why it is not one.

    The checks run in order, so the message names the first thing that is wrong: not
    JSON, not a JSON object, a missing or unsupported ``schema_version``, then every
    field error by field name. Field values are never quoted: a body is data from the
    queue and may be large or sensitive.
    """
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise errors.MalformedDispatchError(
            f"The dispatch body is not JSON ({exc}); it is dead-lettered."
        ) from exc
    if not isinstance(payload, dict):
        raise errors.MalformedDispatchError(
            f"The dispatch body is a JSON {_json_type(payload)}, not an object; "
            f"it is dead-lettered."
        )
    if "schema_version" not in payload:
        raise errors.MalformedDispatchError(
            f"The dispatch has no schema_version; this FlowForge supports schema_version "
            f"{DISPATCH_SCHEMA_VERSION}. It is dead-lettered."
        )
    version = payload["schema_version"]
    # ``True == 1`` in Python, so compare the JSON type too.
    if type(version) is not int or version != DISPATCH_SCHEMA_VERSION:
        raise errors.MalformedDispatchError(
            f"The dispatch has schema_version {json.dumps(version)[:40]} "
            f"({_json_type(version)}); this FlowForge supports schema_version "
            f"{DISPATCH_SCHEMA_VERSION} only. It was published by an incompatible "
            f"FlowForge and is dead-lettered."
        )
    try:
        # strict: JSON gives UUIDs as strings (allowed), but no number as a string.
        return DispatchMessage.model_validate_json(body, strict=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(body)'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
        raise errors.MalformedDispatchError(
            f"The dispatch has invalid fields: {problems}. It is dead-lettered."
        ) from exc


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
