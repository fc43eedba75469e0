"""A URL's password is masked whole wherever it appears, a raw ``@`` in it included
(flowforge/redaction.py): nothing between ``user:`` and the host's ``@`` survives."""

from __future__ import annotations

import logging

import pytest

from flowforge.cli.logs import JsonFormatter, StructuredFormatter
from flowforge.redaction import redacted

#: A password with two raw (not percent-encoded) ``@``: libpq and pika take the last
#: ``@`` before the host as the end of the password, and so must the mask. Each piece
#: between the ``@`` is spelled nowhere else in the line.
PIECES = ("Zq7", "Xv8", "Wk9")
SECRET = "@".join(PIECES)
URL = f"postgresql://app:{SECRET}@db.internal:5432/flowforge"
MASKED = "postgresql://app:***@db.internal:5432/flowforge"


def test_a_password_with_raw_at_signs_is_masked_whole() -> None:
    assert redacted(URL) == MASKED
    assert redacted(f"a,{URL} b") == f"a,{MASKED} b"


@pytest.mark.parametrize("formatter", [StructuredFormatter(), JsonFormatter()])
def test_no_piece_of_a_password_with_raw_at_signs_reaches_a_log_line(
    formatter: logging.Formatter,
) -> None:
    made = logging.LogRecord(
        "flowforge.test", logging.INFO, __file__, 1, f"cannot reach {URL}", (), None
    )
    made.__dict__["database_url"] = URL
    line = formatter.format(made)
    assert [piece for piece in PIECES if piece in line] == []
    assert line.count("app:***@db.internal:5432") == 2
