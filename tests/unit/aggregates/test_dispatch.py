"""The dispatch message's wire format: round trip, and every way a body can be malformed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from flowforge import errors
from flowforge.aggregates.dispatch import (
    DISPATCH_SCHEMA_VERSION,
    MAX_FENCING_TOKEN,
    DispatchMessage,
    decode_dispatch,
)

messages = st.builds(
    DispatchMessage,
    dispatch_id=st.uuids(),
    task_run_id=st.uuids(),
    task_key=st.text(min_size=1),
    task_type=st.text(min_size=1),
    fencing_token=st.integers(min_value=0, max_value=MAX_FENCING_TOKEN),
)


def valid_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "schema_version": 1,
        "dispatch_id": str(uuid.uuid4()),
        "task_run_id": str(uuid.uuid4()),
        "task_key": "extract",
        "task_type": "http_get",
        "fencing_token": 3,
    }
    payload.update(changes)
    return payload


def malformed(body: bytes) -> str:
    with pytest.raises(errors.MalformedDispatchError) as caught:
        decode_dispatch(body)
    return str(caught.value)


@given(messages)
def test_a_message_decodes_to_itself_after_encoding(message: DispatchMessage) -> None:
    assert decode_dispatch(message.encode()) == message


@given(messages)
def test_the_encoding_is_compact_json_carrying_every_field(message: DispatchMessage) -> None:
    body = message.encode()
    assert json.loads(body) == {
        "schema_version": 1,
        "dispatch_id": str(message.dispatch_id),
        "task_run_id": str(message.task_run_id),
        "task_key": message.task_key,
        "task_type": message.task_type,
        "fencing_token": message.fencing_token,
    }
    compact = json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False)
    assert body == compact.encode("utf-8")


@given(messages, st.text(min_size=1, max_size=64))
def test_a_message_of_a_deployment_is_version_2_and_decodes_to_itself(
    message: DispatchMessage, deployment: str
) -> None:
    stamped = message.model_copy(update={"deployment": deployment, "schema_version": 2})
    body = json.loads(stamped.encode())
    assert body["schema_version"] == DISPATCH_SCHEMA_VERSION == 2
    assert body["deployment"] == deployment
    assert decode_dispatch(stamped.encode()) == stamped


def test_a_message_built_with_a_deployment_is_version_2() -> None:
    built = DispatchMessage(
        dispatch_id=uuid.uuid4(),
        task_run_id=uuid.uuid4(),
        task_key="extract",
        task_type="http_get",
        fencing_token=0,
        deployment="3f2a6c1e0b9d",
    )
    assert built.schema_version == 2


def test_a_version_1_body_from_before_deployments_still_decodes() -> None:
    message = decode_dispatch(json.dumps(valid_payload()).encode())
    assert message.schema_version == 1 and message.deployment is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"schema_version": 2}, "schema_version 2 requires a deployment"),
        ({"deployment": "3f2a6c1e0b9d"}, "schema_version 1 carries no deployment"),
        ({"schema_version": 2, "deployment": ""}, "deployment: "),
    ],
)
def test_a_version_and_deployment_that_disagree_are_malformed(
    changes: dict[str, Any], problem: str
) -> None:
    assert problem in malformed(json.dumps(valid_payload(**changes)).encode())


def test_a_message_is_immutable() -> None:
    message = decode_dispatch(json.dumps(valid_payload()).encode())
    with pytest.raises(ValidationError):
        message.fencing_token = 4  # type: ignore[misc]


def test_a_body_that_is_not_json_is_malformed_and_says_so() -> None:
    assert "not JSON" in malformed(b"{not json")


def test_a_body_that_is_not_utf8_is_malformed_as_not_json() -> None:
    assert "not JSON" in malformed(b"\xff\xfe\xfa")


@pytest.mark.parametrize(
    ("body", "json_type"),
    [(b"[1, 2]", "array"), (b'"dispatch"', "string"), (b"42", "number"), (b"null", "null")],
)
def test_a_json_body_that_is_not_an_object_is_malformed_and_names_its_type(
    body: bytes, json_type: str
) -> None:
    message = malformed(body)
    assert f"JSON {json_type}, not an object" in message


def test_a_body_without_schema_version_is_malformed_and_names_the_supported_version() -> None:
    payload = valid_payload()
    del payload["schema_version"]
    message = malformed(json.dumps(payload).encode())
    assert "no schema_version" in message
    assert "supports schema_version 1" in message


@pytest.mark.parametrize(("version", "shown"), [(3, "3"), ("1", '"1"'), (True, "true")])
def test_an_unsupported_schema_version_is_malformed_and_names_found_and_supported(
    version: object, shown: str
) -> None:
    message = malformed(json.dumps(valid_payload(schema_version=version)).encode())
    assert f"schema_version {shown} " in message
    assert "supports schema_version 1 and 2 only" in message


def test_a_missing_field_is_malformed_and_named() -> None:
    payload = valid_payload()
    del payload["task_run_id"]
    message = malformed(json.dumps(payload).encode())
    assert "task_run_id: Field required" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dispatch_id", "not-a-uuid"),
        ("task_run_id", 12),
        ("task_key", ""),
        ("task_type", None),
        ("fencing_token", -1),
        ("fencing_token", MAX_FENCING_TOKEN + 1),
        ("fencing_token", "3"),
        ("fencing_token", True),
        ("fencing_token", 3.5),
    ],
)
def test_an_invalid_field_is_malformed_and_named(field: str, value: object) -> None:
    message = malformed(json.dumps(valid_payload(**{field: value})).encode())
    assert f"invalid fields: {field}: " in message


def test_every_invalid_field_is_named_in_one_message() -> None:
    message = malformed(json.dumps(valid_payload(task_key="", fencing_token=-1)).encode())
    assert "task_key: " in message
    assert "fencing_token: " in message


def test_an_unknown_field_is_malformed_and_named() -> None:
    message = malformed(json.dumps(valid_payload(priority=5)).encode())
    assert "priority: Extra inputs are not permitted" in message


def test_a_field_error_does_not_quote_the_body() -> None:
    message = malformed(json.dumps(valid_payload(task_key="", secret="hunter2")).encode())
    assert "hunter2" not in message
