"""Log lines (flowforge/cli/logs.py): the text format, the JSON format (one object a
line), and a URL's password masked in both, wherever it appears."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from flowforge.cli.logs import JsonFormatter, StructuredFormatter
from flowforge.redaction import redacted

SECRET = "s3cr3t-pw"
URL = f"postgresql://app:{SECRET}@db.internal:5432/flowforge"


def record(
    message: str, *, exc: BaseException | None = None, **fields: object
) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    made = logging.LogRecord("flowforge.test", logging.INFO, __file__, 1, message, (), exc_info)
    made.__dict__.update(fields)
    return made


def raised(message: str) -> BaseException:
    try:
        raise RuntimeError(message)
    except RuntimeError:
        return sys.exc_info()[1]  # type: ignore[return-value]


def test_a_json_line_is_one_object_with_the_records_fields() -> None:
    line = JsonFormatter().format(
        record("task finished", task_run_id="abc", attempt=2, fencing_token=7, ok=True)
    )
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "task finished"
    assert (entry["level"], entry["logger"]) == ("INFO", "flowforge.test")
    assert entry["time"].endswith("Z")
    assert (entry["task_run_id"], entry["attempt"], entry["fencing_token"], entry["ok"]) == (
        "abc",
        2,
        7,
        True,
    )


def test_a_json_lines_traceback_is_in_its_exception_field_on_the_same_line() -> None:
    line = JsonFormatter().format(record("handler failed", exc=raised("boom\non two lines")))
    assert "\n" not in line
    entry = json.loads(line)
    assert "RuntimeError: boom\non two lines" in entry["exception"]
    assert "Traceback (most recent call last)" in entry["exception"]


@pytest.mark.parametrize("formatter", [StructuredFormatter(), JsonFormatter()])
def test_a_urls_password_is_masked_in_the_message_the_fields_and_the_traceback(
    formatter: logging.Formatter,
) -> None:
    made = record(f"cannot reach {URL}", exc=raised(f"connect to {URL} failed"), url=URL)
    line = formatter.format(made)
    assert SECRET not in line
    assert line.count("app:***@db.internal") == 3


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (URL, "postgresql://app:***@db.internal:5432/flowforge"),
        (
            "amqp://guest:guest@a:5672/%2F,amqp://guest:guest@b",
            "amqp://guest:***@a:5672/%2F,amqp://guest:***@b",
        ),
        ("postgresql://app@db/flowforge", "postgresql://app@db/flowforge"),
        ("postgresql://db/flowforge", "postgresql://db/flowforge"),
        ("host=db password=hunter2 user=app", "host=db password=*** user=app"),
        ("host=db password='two words' user=app", "host=db password=*** user=app"),
        ("sqlite:///.flowforge/flowforge.db", "sqlite:///.flowforge/flowforge.db"),
        ("a p@ssword-free line", "a p@ssword-free line"),
    ],
)
def test_redacted_masks_every_password_and_nothing_else(text: str, shown: str) -> None:
    assert redacted(text) == shown
