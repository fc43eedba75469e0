"""`flowforge ui` serves without a token on loopback only (flowforge/cli/ui.py): a host
*name* may resolve to any address, so only ``localhost`` and loopback addresses count."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowforge.cli import main, ui


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.8.9.10", "::1"])
def test_loopback_addresses_and_localhost_are_loopback(host: str) -> None:
    assert ui.is_loopback(host)


@pytest.mark.parametrize(
    "host",
    [
        "db.internal",  # a name: it may resolve to anything
        "localhost.example.com",  # begins like localhost, is not it
        "ui",  # a bare name
        "10.1.2.3",
        "192.168.0.7",
        "0.0.0.0",  # every interface
        "::",
        "fe80::1",
    ],
)
def test_other_names_and_addresses_are_not_loopback(host: str) -> None:
    assert not ui.is_loopback(host)


@pytest.mark.parametrize("host", ["ui.example.com", "10.1.2.3"])
def test_serving_on_a_name_or_address_beyond_loopback_without_a_token_is_refused(
    host: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(ui.TOKEN_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main.main(["ui", "--host", host]) == 2
    assert f"--host {host} is not a loopback address" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before opening anything
