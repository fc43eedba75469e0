"""From a database URL to where FlowForge's data lives, and whether it may be created
(pure: nothing is opened)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowforge import errors
from flowforge.config import (
    LISTEN_DATABASE_URL_VARIABLE,
    PREPARED_STATEMENTS_VARIABLE,
    Settings,
)
from flowforge.projections.db.factory import LIBPQ_OPTIONS, PREPARED_STATEMENTS
from flowforge.projections.db.location import parse_database_url, parse_listen_url


def test_only_a_migrating_open_lets_the_library_create_its_table() -> None:
    location = parse_database_url("postgresql://u@db.example:5433/ff")
    assert location.eventsourcing_env(create_tables=True)["CREATE_TABLE"] == "y"
    assert location.eventsourcing_env(create_tables=False)["CREATE_TABLE"] == "n"
    assert location.display == "db.example:5433/ff"


def test_a_missing_sqlite_file_is_refused_naming_it_and_the_init_command(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "none.db"
    location = parse_database_url(f"sqlite:///{missing}")
    with pytest.raises(errors.DatabaseMissingError) as raised:
        location.require_existing_file()
    assert str(missing) in str(raised.value) and "flowforge db init" in str(raised.value)
    assert not missing.exists()


def test_a_sqlite_database_in_a_missing_directory_is_refused_naming_it(tmp_path: Path) -> None:
    location = parse_database_url(f"sqlite:///{tmp_path}/absent/ff.db")
    with pytest.raises(errors.ConfigurationError, match="absent does not exist"):
        location.require_directory()


def test_a_url_with_a_primary_and_a_standby_keeps_both_hosts_in_order_with_their_ports() -> None:
    location = parse_database_url(
        "postgresql://ff:pw@db-1:5433,db-2/flowforge?target_session_attrs=read-write"
    )
    assert (location.env["POSTGRES_HOST"], location.env["POSTGRES_PORT"]) == (
        "db-1,db-2",
        "5433,5432",
    )
    assert (location.env["POSTGRES_USER"], location.env["POSTGRES_PASSWORD"]) == ("ff", "pw")
    assert location.display == "db-1:5433,db-2:5432/flowforge"


def test_the_urls_other_libpq_parameters_reach_every_connection() -> None:
    location = parse_database_url(
        "postgresql://db-1,db-2/flowforge?target_session_attrs=read-write&sslmode=require"
    )
    options = location.env[LIBPQ_OPTIONS]
    assert "target_session_attrs=read-write" in options
    assert "sslmode=require" in options
    # A host that does not answer is given up in seconds, so the next is tried.
    assert "connect_timeout=5" in options


def test_a_host_without_a_port_gets_5432_and_one_port_parameter_serves_every_host() -> None:
    assert parse_database_url("postgresql://db-1,db-2:6432/ff").env["POSTGRES_PORT"] == (
        "5432,6432"
    )
    assert parse_database_url("postgresql://db-1,db-2/ff?port=6432").env["POSTGRES_PORT"] == (
        "6432,6432"
    )


def test_a_single_host_url_reads_as_before() -> None:
    location = parse_database_url("postgresql://postgres@127.0.0.1:5432/flowforge")
    assert (location.env["POSTGRES_HOST"], location.env["POSTGRES_PORT"]) == (
        "127.0.0.1",
        "5432",
    )
    assert location.env["POSTGRES_DBNAME"] == "flowforge"
    assert location.display == "127.0.0.1:5432/flowforge"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://u:hunter2@db-1,db-2/ff?port=5433,5434,5435", "port '5433,5434,5435'"),
        ("postgresql://u:hunter2@db-1:x/ff", "port 'x'"),
        ("postgresql://u:hunter2@db-1:70000/ff", "port '70000'"),
        ("postgresql://u:hunter2@db-1,/ff", "needs a host"),
        ("postgresql://u:hunter2@db-1/", "needs a host"),
        ("postgresql://u:hunter2@db-1/ff?target_session=read-write", "target_session"),
    ],
)
def test_a_bad_multi_host_url_is_a_clear_error_that_hides_the_password(
    url: str, problem: str
) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        parse_database_url(url)
    assert problem in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_listen_url_must_be_postgres_beside_a_postgres_database_and_hides_its_password() -> None:
    postgres = parse_database_url("postgresql://u@pgbouncer:6432/ff")
    direct = "postgresql://u:secret@db-1:5432/ff"
    assert parse_listen_url(direct, postgres) == direct
    with pytest.raises(errors.ConfigurationError) as beside_sqlite:
        parse_listen_url(direct, parse_database_url("sqlite:///x.db"))
    with pytest.raises(errors.ConfigurationError) as to_sqlite:
        parse_listen_url("sqlite:///x.db", postgres)
    for raised in (beside_sqlite, to_sqlite):
        assert "listen database URL" in str(raised.value)
        assert "secret" not in str(raised.value)


def test_the_listen_url_is_read_from_the_environment_and_unset_means_the_database_url() -> None:
    direct = "postgresql://u@db-1:5432/ff"
    assert Settings.from_env({LISTEN_DATABASE_URL_VARIABLE: direct}).listen_database_url == direct
    assert Settings.from_env({}).listen_database_url is None
    assert Settings.from_env({LISTEN_DATABASE_URL_VARIABLE: ""}).listen_database_url is None


def test_prepared_statements_are_on_unless_switched_off_and_a_bad_value_is_refused() -> None:
    assert Settings.from_env({}).prepared_statements is True
    assert Settings.from_env({PREPARED_STATEMENTS_VARIABLE: "off"}).prepared_statements is False
    assert Settings.from_env({PREPARED_STATEMENTS_VARIABLE: " On "}).prepared_statements is True
    with pytest.raises(errors.ConfigurationError, match="FLOWFORGE_PREPARED_STATEMENTS"):
        Settings.from_env({PREPARED_STATEMENTS_VARIABLE: "no"})
    location = parse_database_url("postgresql://u@db.example:5432/ff")
    off = location.eventsourcing_env(create_tables=False, prepared_statements=False)
    on = location.eventsourcing_env(create_tables=False)
    assert (off[PREPARED_STATEMENTS], on[PREPARED_STATEMENTS]) == ("n", "y")
