"""The pure core (flowforge/aggregates/) imports no driver, network, thread or outer layer.

Enforced twice, by :mod:`tests.unit.aggregates.purity`: an AST walk of every module, and a
subprocess that imports every module with the forbidden roots blocked on ``sys.meta_path``.
Both checks are themselves tested against deliberately bad code, so that neither can
silently stop detecting.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.unit.aggregates.purity import (
    FORBIDDEN_ROOTS,
    ROOT,
    BlockedImportResult,
    ModuleOutcome,
    blocked_import_check,
    discover_modules,
    find_forbidden_imports,
    forbidden_root,
)

#: Where the scanner tests pretend their source lives: relative imports resolve from here.
AGGREGATE_FILE = "flowforge/aggregates/example.py"


def scan(source: str, filename: str = AGGREGATE_FILE) -> list[tuple[str, str]]:
    """(imported name, forbidden root) for each violation in ``source``."""
    violations = find_forbidden_imports(textwrap.dedent(source), filename)
    return [(violation.name, violation.root) for violation in violations]


# --- the pure core itself ------------------------------------------------------------------


def core_module_names() -> list[str]:
    return [name for name, _ in discover_modules()]


def test_the_aggregates_package_and_its_modules_are_discovered() -> None:
    names = core_module_names()
    assert names
    assert "flowforge.aggregates" in names
    assert "flowforge.aggregates.machines" in names


def test_no_aggregates_module_imports_a_forbidden_name() -> None:
    violations = [
        violation
        for _, path in discover_modules()
        for violation in find_forbidden_imports(
            path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        )
    ]
    assert not violations, "forbidden imports in flowforge/aggregates/:\n" + "\n".join(
        str(violation) for violation in violations
    )


@pytest.fixture(scope="module")
def core_check() -> tuple[list[str], BlockedImportResult]:
    names = core_module_names()
    return names, blocked_import_check(names)


def test_every_aggregates_module_imports_with_the_forbidden_roots_blocked(
    core_check: tuple[list[str], BlockedImportResult],
) -> None:
    names, result = core_check
    assert names
    assert sorted(result.outcomes) == sorted(names)
    assert not result.failures, "modules of flowforge/aggregates/ that are not pure:\n" + (
        "\n".join(outcome.describe() for outcome in result.failures)
    )


# --- the forbidden roots -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "psycopg",
        "psycopg_pool.pool",
        "pika",
        "sqlite3",
        "socket",
        "threading",
        "_thread",
        "asyncio.events",
        "concurrent.futures",
        "http.client",
        "urllib.request",
        "eventsourcing.application",
        "eventsourcing.persistence",
        "eventsourcing.postgres.datastore",
        "flowforge.projections",
        "flowforge.processes.scheduler",
        "flowforge.cli",
    ],
)
def test_drivers_the_network_threads_and_the_outer_layers_are_forbidden(name: str) -> None:
    assert forbidden_root(name) is not None


@pytest.mark.parametrize(
    "name",
    [
        "eventsourcing",
        "eventsourcing.domain",
        "eventsourcing.utils",
        "pydantic",
        "pydantic_core",
        "flowforge",
        "flowforge.errors",
        "flowforge.aggregates.machines",
        "json",
        "pikachu",
        "concurrently",
        "flowforge.processesx",
    ],
)
def test_the_domain_libraries_and_names_merely_sharing_a_prefix_are_allowed(name: str) -> None:
    assert forbidden_root(name) is None


def test_a_name_is_matched_to_its_most_specific_forbidden_root() -> None:
    assert forbidden_root("eventsourcing.postgres.datastore") == "eventsourcing.postgres"
    assert "eventsourcing" not in FORBIDDEN_ROOTS


# --- the AST scanner, against deliberately bad source --------------------------------------


def test_a_top_level_driver_import_is_found() -> None:
    assert scan("import psycopg\n") == [("psycopg", "psycopg")]


def test_a_top_level_sqlite3_import_is_found() -> None:
    assert scan("import json\nimport sqlite3\n") == [("sqlite3", "sqlite3")]


def test_a_violation_names_the_file_the_line_and_the_import() -> None:
    source = "import json\n\nimport socket\n"
    [violation] = find_forbidden_imports(source, AGGREGATE_FILE)
    assert (violation.filename, violation.lineno) == (AGGREGATE_FILE, 3)
    assert str(violation) == f"{AGGREGATE_FILE}:3: imports socket (forbidden root socket)"


def test_an_aliased_import_is_found() -> None:
    assert scan("import multiprocessing as mp\nimport http.client as client\n") == [
        ("multiprocessing", "multiprocessing"),
        ("http.client", "http"),
    ]


def test_an_import_from_a_forbidden_eventsourcing_module_is_found() -> None:
    found = scan("from eventsourcing.postgres import X\n")
    assert ("eventsourcing.postgres", "eventsourcing.postgres") in found


def test_a_forbidden_module_imported_by_name_from_its_package_is_found() -> None:
    assert scan("from eventsourcing import application\n") == [
        ("eventsourcing.application", "eventsourcing.application")
    ]


def test_an_import_nested_in_a_function_is_found() -> None:
    source = """
        def start():
            import threading
            return threading.Thread
    """
    assert scan(source) == [("threading", "threading")]


def test_an_import_in_a_method_of_a_class_is_found() -> None:
    source = """
        class Repository:
            def save(self):
                from psycopg_pool import ConnectionPool
                return ConnectionPool
    """
    assert ("psycopg_pool", "psycopg_pool") in scan(source)


def test_an_import_guarded_by_try_except_import_error_is_found() -> None:
    source = """
        try:
            import pika
        except ImportError:
            pass
    """
    assert scan(source) == [("pika", "pika")]


def test_an_import_under_type_checking_is_found() -> None:
    source = """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from flowforge.projections import store
    """
    assert ("flowforge.projections", "flowforge.projections") in scan(source)


def test_a_relative_import_of_an_outer_layer_is_resolved_and_found() -> None:
    assert scan("from ..processes import worker\n") == [
        ("flowforge.processes", "flowforge.processes"),
        ("flowforge.processes.worker", "flowforge.processes"),
    ]


def test_a_relative_import_of_an_outer_package_by_name_is_found() -> None:
    assert scan("from .. import projections, errors\n") == [
        ("flowforge.projections", "flowforge.projections")
    ]


def test_a_relative_import_in_a_package_init_resolves_against_that_package() -> None:
    init = "flowforge/aggregates/__init__.py"
    assert scan("from . import machines\n", init) == []
    assert scan("from ..cli import main\n", init) == [
        ("flowforge.cli", "flowforge.cli"),
        ("flowforge.cli.main", "flowforge.cli"),
    ]


def test_a_relative_import_resolves_from_an_absolute_filename_too() -> None:
    filename = str(ROOT / "flowforge" / "aggregates" / "example.py")
    assert scan("from ..config import Settings\n", filename) == [
        ("flowforge.config", "flowforge.config"),
        ("flowforge.config.Settings", "flowforge.config"),
    ]


def test_a_dunder_import_call_with_a_literal_name_is_found() -> None:
    assert scan('socket = __import__("socket")\n') == [("socket", "socket")]


def test_a_dunder_import_call_with_a_fromlist_is_found() -> None:
    found = scan('postgres = __import__("eventsourcing", fromlist=["postgres"])\n')
    assert found == [("eventsourcing.postgres", "eventsourcing.postgres")]


def test_an_import_module_call_with_a_literal_name_is_found() -> None:
    source = """
        import importlib

        pool = importlib.import_module("psycopg_pool")
    """
    assert scan(source) == [("psycopg_pool", "psycopg_pool")]


def test_a_bare_import_module_call_is_found() -> None:
    source = """
        from importlib import import_module

        def connect():
            return import_module("pika")
    """
    assert scan(source) == [("pika", "pika")]


def test_a_relative_import_module_call_is_resolved_and_found() -> None:
    source = """
        import importlib

        a = importlib.import_module("..projections", "flowforge.aggregates")
        b = importlib.import_module("..processes", __package__)
    """
    assert scan(source) == [
        ("flowforge.projections", "flowforge.projections"),
        ("flowforge.processes", "flowforge.processes"),
    ]


def test_what_the_pure_core_may_import_yields_no_violations() -> None:
    source = """
        from __future__ import annotations

        import json
        from typing import TYPE_CHECKING

        import pydantic
        from eventsourcing.domain import Aggregate
        from eventsourcing.utils import get_topic
        from eventsourcing import domain, utils

        from flowforge import errors
        from flowforge.aggregates import machines
        from . import states
        from .. import errors as also_errors

        if TYPE_CHECKING:
            from flowforge.aggregates.rules import derive_workflow_run_state

        def later():
            import math
            return __import__("decimal"), importlib.import_module("flowforge.errors")
    """
    assert scan(source) == []


def test_an_import_module_call_with_a_computed_name_is_not_guessed_at() -> None:
    assert scan('importlib.import_module(NAME)\n__import__("sock" + "et")\n') == []


# --- the blocked-import subprocess, against a deliberately bad package ---------------------

PROBE_MODULES = {
    "__init__": "",
    # First, before any probe has used pydantic. email.utils imports socket and pathlib
    # imports urllib.parse, but pydantic loads both when its first model is defined (and an
    # editable install loads pathlib at start-up): they are in the baseline, so the pure
    # core may use them, whatever ran before it.
    "uses_what_pydantic_uses": "import email.utils\nfrom pathlib import Path\n",
    "clean": """
        from eventsourcing.domain import Aggregate
        from eventsourcing.utils import resolve_topic
        from pydantic import BaseModel

        from flowforge import errors


        class Thing(Aggregate):
            def __init__(self, name):
                self.name = name


        class Spec(BaseModel):
            key: str


        Thing(name="x")
        Spec(key="k")
        # An allowed library loading a forbidden module for its own needs is not blocked.
        THREAD = resolve_topic("threading:Thread")
    """,
    "thread_in_function": """
        def start():
            import threading

            return threading.get_ident()


        start()
    """,
    "sqlite_at_top": "import sqlite3\n",
    "swallowed": """
        try:
            import socket
        except ImportError:
            socket = None
    """,
    "_driver": "import psycopg\n",
    "via_helper": "from purity_probe import _driver\n",
    "via_stdlib": "import socketserver\n",
    "via_vendor": "import purity_probe_vendor\n",
    "dynamic": """
        import importlib

        importlib.import_module("eventsourcing.postgres")
    """,
    "outer_layer": "import flowforge.projections\n",
    "broken": "raise ValueError('a bad table')\n",
}
#: A third-party package outside the checked one; what it imports counts against its importer.
VENDOR_INIT = "import subprocess\n"


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> BlockedImportResult:
    root: Path = tmp_path_factory.mktemp("purity_probe")
    package = root / "purity_probe"
    package.mkdir()
    for name, source in PROBE_MODULES.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    vendor = root / "purity_probe_vendor"
    vendor.mkdir()
    (vendor / "__init__.py").write_text(VENDOR_INIT, encoding="utf-8")
    modules = [f"purity_probe.{name}" for name in PROBE_MODULES if name != "__init__"]
    # "clean" runs early, so the later probes run after pydantic has loaded socket & co.
    return blocked_import_check(modules, extra_paths=[root])


def outcome_of(result: BlockedImportResult, name: str) -> ModuleOutcome:
    return result.outcomes[f"purity_probe.{name}"]


def assert_blocked(outcome: ModuleOutcome, name: str, importer: str) -> None:
    assert not outcome.ok
    found = [(attempt.name, attempt.importer) for attempt in outcome.blocked]
    assert (name, importer) in found, outcome.describe()


def test_the_blocker_reports_a_thread_import_made_in_a_function_at_import_time(
    probe: BlockedImportResult,
) -> None:
    # eventsourcing.utils had already loaded threading: the blocker must purge it first.
    assert "threading" in probe.purged
    outcome = outcome_of(probe, "thread_in_function")
    assert_blocked(outcome, "threading", "purity_probe.thread_in_function")
    assert outcome.error is not None
    assert "ImportError" in outcome.error


def test_the_blocker_reports_a_top_level_sqlite3_import(probe: BlockedImportResult) -> None:
    assert_blocked(outcome_of(probe, "sqlite_at_top"), "sqlite3", "purity_probe.sqlite_at_top")


def test_the_blocker_reports_an_import_whose_import_error_is_swallowed(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "swallowed")
    assert outcome.error is None
    assert_blocked(outcome, "socket", "purity_probe.swallowed")


def test_the_blocker_reports_a_driver_imported_through_a_helper_module(
    probe: BlockedImportResult,
) -> None:
    assert_blocked(outcome_of(probe, "via_helper"), "psycopg", "purity_probe._driver")


def test_the_blocker_reports_a_forbidden_module_reached_through_the_standard_library(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "via_stdlib")
    assert_blocked(outcome, "socket", "socketserver")
    assert outcome.blocked[0].on_behalf_of == "purity_probe.via_stdlib"


def test_the_blocker_reports_a_forbidden_module_reached_through_a_third_party_package(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "via_vendor")
    assert_blocked(outcome, "subprocess", "purity_probe_vendor")
    assert outcome.blocked[0].on_behalf_of == "purity_probe.via_vendor"


def test_the_blocker_reports_a_dynamic_import_of_a_forbidden_eventsourcing_module(
    probe: BlockedImportResult,
) -> None:
    assert_blocked(outcome_of(probe, "dynamic"), "eventsourcing.postgres", "purity_probe.dynamic")


def test_the_blocker_reports_an_import_of_an_outer_flowforge_layer(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "outer_layer")
    assert_blocked(outcome, "flowforge.projections", "purity_probe.outer_layer")


def test_the_blocker_reports_a_module_that_fails_to_import_for_another_reason(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "broken")
    assert not outcome.ok
    assert outcome.blocked == ()
    assert outcome.error is not None
    assert "ValueError: a bad table" in outcome.error


def test_the_blocker_lets_the_allowed_libraries_load_what_they_need(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "clean")
    assert outcome.ok, outcome.describe()
    allowed = [(a.name, a.on_behalf_of) for a in outcome.attempts if not a.blocked]
    assert ("threading", "eventsourcing.utils") in allowed


def test_a_standard_library_module_the_allowed_libraries_use_is_not_blocked(
    probe: BlockedImportResult,
) -> None:
    outcome = outcome_of(probe, "uses_what_pydantic_uses")
    assert outcome.ok, outcome.describe()
