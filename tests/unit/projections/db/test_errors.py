"""Driver errors become FlowForge errors that say what to do (pure: nothing is opened)."""

from __future__ import annotations

import psycopg
import pytest

from flowforge import errors
from flowforge.projections.db.errors import translate_errors


def test_a_prepared_statement_lost_to_a_pooler_is_a_configuration_error_naming_the_switch() -> (
    None
):
    for lost in (
        psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist'),
        psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
    ):
        with pytest.raises(errors.ConfigurationError) as raised, translate_errors("h:5432/ff"):
            raise lost
        assert "FLOWFORGE_PREPARED_STATEMENTS=off" in str(raised.value)
