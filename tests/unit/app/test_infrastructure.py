"""From a database URL to the event store's settings: pure, no server needed."""

from __future__ import annotations

import pytest

from flowforge import errors
from flowforge.app.infrastructure import LIBPQ_OPTIONS, parse_database_url


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
