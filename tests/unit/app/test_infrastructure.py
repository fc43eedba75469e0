"""From a database URL to where FlowForge's data lives, and whether it may be created
(pure: nothing is opened)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowforge import errors
from flowforge.app import event_store
from flowforge.app.infrastructure import parse_database_url


def test_only_a_migrating_open_lets_the_library_create_its_table() -> None:
    location = parse_database_url("postgresql://u@db.example:5433/ff")
    assert location.eventsourcing_env(create_tables=True)["CREATE_TABLE"] == "y"
    assert location.eventsourcing_env(create_tables=False)["CREATE_TABLE"] == "n"
    assert location.display == "db.example:5433/ff"


def test_the_embedded_sqlite_default_migrates_and_postgres_is_migrated_on_purpose() -> None:
    assert event_store.migrates_by_default(parse_database_url("sqlite:///x.db"))
    assert not event_store.migrates_by_default(parse_database_url("postgresql://h/db"))


def test_a_missing_sqlite_file_is_refused_naming_it_and_the_init_command(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "none.db"
    location = parse_database_url(f"sqlite:///{missing}")
    with pytest.raises(errors.DatabaseMissingError) as raised:
        location.require_existing_file()
    assert str(missing) in str(raised.value) and "flowforge db init" in str(raised.value)
    assert not missing.exists()


def test_a_read_only_open_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(errors.DatabaseMissingError):
        event_store.open_persistence(f"sqlite:///{missing}", migrate=False)
    assert list(tmp_path.iterdir()) == []


def test_a_sqlite_database_in_a_missing_directory_is_refused_naming_it(tmp_path: Path) -> None:
    location = parse_database_url(f"sqlite:///{tmp_path}/absent/ff.db")
    with pytest.raises(errors.ConfigurationError, match="absent does not exist"):
        location.require_directory()


def test_a_missing_schema_is_a_refusal_that_says_which_command_migrates() -> None:
    assert issubclass(errors.SchemaMigrationRequiredError, errors.SchemaVersionError)
    assert issubclass(errors.DatabaseMissingError, errors.SchemaMigrationRequiredError)
