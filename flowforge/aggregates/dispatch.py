"""The dispatch message: what the publisher puts on the queue and the worker takes off it.

A dispatch says "task run X may be claimed now"; it carries no authority of its own. The
worker claims the task run by its id (READY -> RUNNING, which bumps the fencing token),
so a duplicate or stale dispatch claims nothing and is acked without running anything.
``fencing_token`` is the token the task run had when it was dispatched: diagnostic, not a
lease.

The wire format is compact JSON with an explicit ``schema_version``. A body that does not
decode is never guessed at: :func:`decode_dispatch` raises ``MalformedDispatchError``
saying exactly why, and the worker dead-letters the message.

Version 2 adds ``deployment``: the id of the database the task run lives in (stored at
``flowforge db init``), so a worker of another deployment that receives it (two
deployments configured with the same queue) can say so instead of finding no such task
run. A message without it is version 1, as a FlowForge before deployments wrote it; it
still decodes, and carries no identity to check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Final, Literal, TypeAlias
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flowforge import errors

#: The wire version this FlowForge writes; it reads this one and the ones before it.
DISPATCH_SCHEMA_VERSION: Final = 2
#: Every version :func:`decode_dispatch` reads.
SUPPORTED_SCHEMA_VERSIONS: Final = (1, 2)

#: The fencing token is a BIGINT column; a larger value cannot have come from FlowForge.
MAX_FENCING_TOKEN: Final = 2**63 - 1


class DispatchMessage(BaseModel):
    """One task run made dispatchable: the body of one message on the dispatch queue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: 2 when ``deployment`` is set, 1 (the format before deployments) when it is not.
    schema_version: Literal[1, 2] = 1
    dispatch_id: UUID
    task_run_id: UUID
    task_key: str = Field(min_length=1)
    task_type: str = Field(min_length=1)
    # strict: a JSON ``true`` or ``"3"`` is a malformed message, not token 1 or 3.
    fencing_token: int = Field(ge=0, le=MAX_FENCING_TOKEN, strict=True)
    #: The deployment (database) that published it; version 2 only.
    deployment: str | None = Field(None, min_length=1, max_length=64)

    @model_validator(mode="after")
    def _version_matches_fields(self) -> DispatchMessage:
        """Version 2 carries a deployment and version 1 none; a message built with a
        deployment and no version is version 2."""
        if self.deployment is not None and "schema_version" not in self.model_fields_set:
            object.__setattr__(self, "schema_version", 2)
        if (self.schema_version == 2) != (self.deployment is not None):
            needs = "requires a" if self.schema_version == 2 else "carries no"
            raise ValueError(f"schema_version {self.schema_version} {needs} deployment")
        return self

    def encode(self) -> bytes:
        """The message body: compact UTF-8 JSON."""
        # A version 1 message is written exactly as before deployments existed.
        return self.model_dump_json(exclude_none=self.deployment is None).encode("utf-8")


#: A dispatch's message headers: telemetry that travels beside its body, never read for
#: a decision (a message without them is handled the same). The time its outbox row was
#: written by the database's clock (ISO 8601), for the ready-to-claimed latency; every
#: other text header is its run's trace context, as the run stored it (W3C
#: ``traceparent``, ``tracestate``: ``flowforge.tracing``). Headers, not body fields: a
#: worker of an older FlowForge refuses a body with a field it does not know.
READY_AT_HEADER: Final = "x-flowforge-ready-at"

#: What a publisher sends with each message, by its dispatch id.
DispatchHeaders: TypeAlias = Mapping[UUID, Mapping[str, str]]


def dispatch_headers(
    ready_at: datetime, trace_context: Mapping[str, str] | None
) -> dict[str, str]:
    """The headers of a dispatch whose outbox row was written at ``ready_at``."""
    return {**(trace_context or {}), READY_AT_HEADER: ready_at.isoformat()}


def ready_at_of(headers: Mapping[str, object]) -> datetime | None:
    """When the dispatch was written, from its headers; None if they do not say (an
    older publisher) or say it in a form that is not an aware ISO 8601 time."""
    value = headers.get(READY_AT_HEADER)
    if not isinstance(value, str):
        return None
    try:
        ready_at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return ready_at if ready_at.tzinfo is not None else None


def text_headers(headers: Mapping[str, object]) -> dict[str, str]:
    """A delivery's headers that a publisher wrote: its text ones (a broker's own, such
    as RabbitMQ's ``x-delivery-count``, are numbers or tables)."""
    return {key: value for key, value in headers.items() if isinstance(value, str)}


def trace_context_of(headers: Mapping[str, object]) -> dict[str, str]:
    """The trace context in a dispatch's headers: its text headers but FlowForge's own."""
    texts = text_headers(headers)
    texts.pop(READY_AT_HEADER, None)
    return texts


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
    supported = " and ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
    if "schema_version" not in payload:
        raise errors.MalformedDispatchError(
            f"The dispatch has no schema_version; this FlowForge supports schema_version "
            f"{supported}. It is dead-lettered."
        )
    version = payload["schema_version"]
    # ``True == 1`` in Python, so compare the JSON type too.
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        raise errors.MalformedDispatchError(
            f"The dispatch has schema_version {json.dumps(version)[:40]} "
            f"({_json_type(version)}); this FlowForge supports schema_version "
            f"{supported} only. It was published by an incompatible FlowForge and is "
            f"dead-lettered."
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
