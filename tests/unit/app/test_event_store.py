"""Opening persistence: what migrates by default, and what a read-only open refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowforge import errors
from flowforge.app import event_store
from flowforge.projections.db.location import parse_database_url


def test_the_embedded_sqlite_default_migrates_and_postgres_is_migrated_on_purpose() -> None:
    assert parse_database_url("sqlite:///x.db").migrates_by_default
    assert not parse_database_url("postgresql://h/db").migrates_by_default


def test_a_read_only_open_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(errors.DatabaseMissingError):
        event_store.open_persistence(f"sqlite:///{missing}", migrate=False)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_schema_is_a_refusal_that_says_which_command_migrates() -> None:
    assert issubclass(errors.SchemaMigrationRequiredError, errors.SchemaVersionError)
    assert issubclass(errors.DatabaseMissingError, errors.SchemaMigrationRequiredError)
