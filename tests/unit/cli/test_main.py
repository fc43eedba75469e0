"""The command line's loading of a command: the engine is imported with the cyclic
garbage collector off (start-up CPU, docs/performance.md, "Design choices that buy the
speed"), and the collector is left as it was found, whatever the import did."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowforge.cli import main as cli_main

COMMAND_MODULE = """
import gc

COLLECTING_AT_IMPORT = gc.isenabled()


def command(args):
    return 0
"""


@pytest.fixture
def command_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A command module of its own (a fresh name each time: it is imported afresh)."""
    name = f"ff_cli_command_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(COMMAND_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_command_module_is_imported_with_the_collector_off_and_it_is_back_on_after(
    command_module: str, collecting: None
) -> None:
    handler = cli_main._handler(f"{command_module}:command")
    assert sys.modules[command_module].COLLECTING_AT_IMPORT is False
    assert gc.isenabled()
    assert handler(None) == 0  # type: ignore[arg-type]


def test_a_command_module_whose_import_fails_still_leaves_the_collector_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collecting: None
) -> None:
    (tmp_path / "ff_cli_broken_command.py").write_text("raise RuntimeError('broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="broken"):
        cli_main._handler("ff_cli_broken_command:command")
    sys.modules.pop("ff_cli_broken_command", None)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(command_module: str) -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        cli_main._handler(f"{command_module}:command")
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
