"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and can break.

The layers and what the pure core (flowforge/aggregates/) may import are import-linter
contracts, run by `make lint` and CI; this runs them with the tests too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: What no driver may be loaded by: importing the pure core pulls in flowforge/__init__.py
#: too, which must load its names lazily (a runtime matter import-linter cannot see).
DRIVERS = ("psycopg", "psycopg_pool", "pika", "sqlite3", "eventsourcing.persistence")


def lint(config: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(config)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_import_contracts_are_kept() -> None:
    result = lint(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


def pure_core_contract() -> dict[str, Any]:
    """The contract listing the drivers, the network and threads the core may not import."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if "psycopg" in c.get("forbidden_modules", ()))


def test_the_pure_core_contract_breaks_on_a_thread_imported_inside_a_function(
    tmp_path: Path,
) -> None:
    # The project's own contract, pointed at a scratch package shaped like flowforge.
    contract = pure_core_contract()
    config = tmp_path / "importlinter.toml"
    config.write_text(
        textwrap.dedent(f"""
            [tool.importlinter]
            root_packages = ["probe"]
            include_external_packages = true

            [[tool.importlinter.contracts]]
            name = {json.dumps(contract["name"])}
            type = "forbidden"
            source_modules = ["probe.aggregates"]
            forbidden_modules = {json.dumps(contract["forbidden_modules"])}
        """),
        encoding="utf-8",
    )
    core = tmp_path / "probe" / "aggregates"
    core.mkdir(parents=True)
    (tmp_path / "probe" / "__init__.py").write_text("", encoding="utf-8")
    (core / "__init__.py").write_text("import json\n", encoding="utf-8")
    clean = lint(config, cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    (core / "rules.py").write_text("def later():\n    import threading\n", encoding="utf-8")
    broken = lint(config, cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "probe.aggregates.rules -> threading" in broken.stdout


def test_importing_every_pure_core_module_loads_no_driver() -> None:
    code = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        import flowforge.aggregates as core
        for module in pkgutil.walk_packages(core.__path__, "flowforge.aggregates."):
            importlib.import_module(module.name)
        print(sorted(m for m in {DRIVERS!r} if m in sys.modules))
    """)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_the_no_cycle_contract_breaks_on_two_modules_that_import_each_other(
    tmp_path: Path,
) -> None:
    # The project's own contract, pointed at a scratch package: a worker and its batch
    # that import each other, as processes/worker.py and batch.py once did (even when one
    # side's import is for type checking only).
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["type"] == "acyclic_siblings")
    assert contract["ancestors"] == ["flowforge"]
    scratch = tmp_path / "importlinter.toml"
    scratch.write_text(
        textwrap.dedent(f"""
            [tool.importlinter]
            root_packages = ["probe"]

            [[tool.importlinter.contracts]]
            name = {json.dumps(contract["name"])}
            type = "acyclic_siblings"
            ancestors = ["probe"]
        """),
        encoding="utf-8",
    )
    processes = tmp_path / "probe" / "processes"
    processes.mkdir(parents=True)
    for init in (tmp_path / "probe" / "__init__.py", processes / "__init__.py"):
        init.write_text("", encoding="utf-8")
    (processes / "steps.py").write_text("", encoding="utf-8")
    (processes / "batch.py").write_text("from probe.processes import steps\n", encoding="utf-8")
    (processes / "worker.py").write_text(
        "from probe.processes import batch, steps\n", encoding="utf-8"
    )
    clean = lint(scratch, cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    (processes / "batch.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from probe.processes import worker\n",
        encoding="utf-8",
    )
    broken = lint(scratch, cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "No cycles are allowed in probe.processes" in broken.stdout
