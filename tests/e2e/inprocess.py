"""The CLI's entry point called in this process: a subprocess per case would take
minutes where dozens of cases check messages. An exception escaping ``main`` fails the
test as a traceback would; tests of real processes use ``tests.e2e.test_cli.Cli``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flowforge.cli.main import main


@dataclass
class InProcess:
    """``flowforge ARGS`` through ``main``, in ``cwd``, on ``database_url``."""

    cwd: Path
    database_url: str
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    env: dict[str, str] = field(default_factory=dict)

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        with self.monkeypatch.context() as patch:
            for name in [k for k in os.environ if k.startswith("FLOWFORGE_")]:
                patch.delenv(name)
            for name, value in {"FLOWFORGE_DATABASE_URL": self.database_url, **self.env}.items():
                patch.setenv(name, value)
            patch.chdir(self.cwd)
            self.capsys.readouterr()
            root = logging.getLogger()
            handlers, level = list(root.handlers), root.level
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors, --version
                code = int(exit_.code or 0)
            finally:  # main configures logging for a process; this is one test
                root.handlers[:] = handlers
                root.setLevel(level)
            out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    def json(self, *args: str) -> Any:
        done = self(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> InProcess:
    cli = InProcess(tmp_path, f"sqlite:///{tmp_path / 'flowforge.db'}", capsys, monkeypatch)
    # Read-only commands never create a database: start from an initialised one.
    assert cli("db", "init").returncode == 0
    return cli


def on_backend(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> InProcess:
    """For a fixture parametrized ``sqlite`` / ``postgres`` (this session's database)."""
    cli = on_sqlite(tmp_path, capsys, monkeypatch)
    if request.param == "postgres":
        cli.database_url = request.getfixturevalue("postgres_url")
    return cli
