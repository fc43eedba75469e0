"""Checks that ``flowforge/aggregates/`` (the pure core) imports nothing it must not.

Two independent checks, so that neither can hide what the other misses:

* :func:`find_forbidden_imports` reads a module's source and walks its whole AST, so an
  import is found wherever it is written: at the top, nested in a function or a class,
  under ``if TYPE_CHECKING:``, inside ``try/except ImportError``, relative
  (``from ..projections import x``), or as ``__import__("x")`` /
  ``importlib.import_module("x")`` with a literal name.
* :func:`blocked_import_check` imports modules for real, in a fresh interpreter whose
  ``sys.meta_path`` refuses every forbidden name, so a transitive import (through a helper
  module or a third-party library) cannot slip past the AST check.

A name is forbidden when it equals one of :data:`FORBIDDEN_ROOTS` or starts with that root
followed by a dot: ``eventsourcing.postgres.datastore`` is forbidden, ``pikachu`` is not.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The project root (the directory holding ``pyproject.toml`` and ``flowforge/``).
ROOT = Path(__file__).resolve().parents[3]
#: The pure core.
AGGREGATES_DIR = ROOT / "flowforge" / "aggregates"

#: Import roots that no module of the pure core may import, directly or transitively.
FORBIDDEN_ROOTS: frozenset[str] = frozenset(
    {
        # Database and broker drivers.
        "psycopg",
        "psycopg_pool",
        "psycopg2",
        "pika",
        "aio_pika",
        "sqlite3",
        "django",
        "sqlalchemy",
        # The network and concurrency.
        "socket",
        "ssl",
        "select",
        "selectors",
        "threading",
        "_thread",
        "multiprocessing",
        "concurrent",
        "asyncio",
        "subprocess",
        "http",
        "urllib",
        "requests",
        # The parts of eventsourcing that are not its domain model.
        "eventsourcing.application",
        "eventsourcing.persistence",
        "eventsourcing.postgres",
        "eventsourcing.sqlite",
        "eventsourcing.system",
        "eventsourcing.popo",
        "eventsourcing.projection",
        "eventsourcing.dispatch",
        "eventsourcing.cipher",
        "eventsourcing.compressor",
        "eventsourcing.interface",
        # FlowForge's outer layers.
        "flowforge.projections",
        "flowforge.processes",
        "flowforge.cli",
        "flowforge.app",
        "flowforge.service",
        "flowforge.config",
    }
)

#: The libraries the pure core may use. The blocked-import check imports and exercises
#: them (:func:`_warm_up`) before it installs the blocker, and lets them (and only them)
#: import forbidden modules for their own needs: ``eventsourcing.utils`` imports
#: ``threading``, and pydantic loads ``threading``, ``socket`` and ``urllib`` lazily when
#: a model is first defined.
ALLOWED_LIBRARIES: tuple[str, ...] = ("pydantic", "eventsourcing.domain", "eventsourcing.utils")
#: Packages whose modules count as the allowed libraries themselves (pydantic's own
#: dependencies included), wherever in the run they are first loaded.
ALLOWED_LIBRARY_ROOTS: tuple[str, ...] = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "eventsourcing.domain",
    "eventsourcing.utils",
)

_IMPORT_FUNCTIONS = frozenset({"__import__", "import_module"})
_REPORT_MARKER = "FLOWFORGE-PURITY-REPORT "


def forbidden_root(name: str, roots: Iterable[str] = FORBIDDEN_ROOTS) -> str | None:
    """The forbidden root that ``name`` falls under, or ``None`` when it is allowed."""
    matches = [root for root in roots if name == root or name.startswith(root + ".")]
    return max(matches, key=len) if matches else None


@dataclass(frozen=True)
class Violation:
    """One forbidden import found in a module's source."""

    filename: str
    lineno: int
    name: str
    root: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: imports {self.name} (forbidden root {self.root})"


def discover_modules(directory: Path = AGGREGATES_DIR) -> list[tuple[str, Path]]:
    """Every module under ``directory`` as (dotted name, path), sorted by name.

    Found on disk rather than by importing, so a module added while the tests run is
    seen, and a module that fails to import is still scanned.
    """
    found = []
    for path in directory.rglob("*.py"):
        module, _ = _module_name(str(path))
        found.append((module, path))
    return sorted(found)


def find_forbidden_imports(source: str, filename: str) -> list[Violation]:
    """Every forbidden import in ``source``, wherever in the module it is written.

    ``filename`` (relative to the project root, or absolute) locates the module, so that
    relative imports resolve against its package.
    """
    module, is_package = _module_name(filename)
    violations = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        for name in _imported_names(node, module, is_package):
            root = forbidden_root(name)
            if root is not None:
                violations.append(Violation(filename, getattr(node, "lineno", 0), name, root))
    return sorted(violations, key=lambda v: (v.lineno, v.name))


def _module_name(filename: str) -> tuple[str, bool]:
    """The dotted module name a file path stands for, and whether it is a package."""
    path = Path(filename)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(ROOT)
        except ValueError:
            path = path.relative_to(path.anchor)
    parts = list(path.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _resolve_relative(package: str, level: int, name: str) -> str | None:
    """``from <level dots><name> import ...`` inside ``package``; ``None`` past the top."""
    parts = package.split(".") if package else []
    if level > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _imported_names(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names an AST node imports (several for ``from a import b, c``)."""
    package = module if is_package else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = (
            _resolve_relative(package, node.level, node.module or "")
            if node.level
            else node.module
        )
        if base is None:
            return
        yield base
        for alias in node.names:
            if alias.name != "*":
                yield f"{base}.{alias.name}"
    elif isinstance(node, ast.Call):
        yield from _dynamic_import_names(node, package)


def _dynamic_import_names(call: ast.Call, package: str) -> Iterator[str]:
    """The names imported by ``__import__(...)`` or ``importlib.import_module(...)``."""
    func = call.func
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if called not in _IMPORT_FUNCTIONS:
        return
    name = _argument(call, 0, "name")
    if not isinstance(name, str):
        return
    if called == "import_module":
        anchor = _argument(call, 1, "package")
        level = len(name) - len(name.lstrip("."))
        if level:
            resolved = _resolve_relative(
                anchor if isinstance(anchor, str) else package, level, name[level:]
            )
            if resolved is not None:
                yield resolved
        else:
            yield name
        return
    given = _argument(call, 4, "level")
    base = _resolve_relative(package, given, name) if isinstance(given, int) and given else name
    if base is None:
        return
    yield base
    fromlist = _argument(call, 3, "fromlist")
    if isinstance(fromlist, list | tuple):
        yield from (f"{base}.{item}" for item in fromlist if isinstance(item, str) and item != "*")


def _argument(call: ast.Call, position: int, keyword: str) -> object:
    """A call's literal argument by position or keyword; ``None`` when absent or not literal."""
    node: ast.expr | None = call.args[position] if len(call.args) > position else None
    for kw in call.keywords:
        if kw.arg == keyword:
            node = kw.value
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


# --- The blocked-import check -------------------------------------------------------------


@dataclass(frozen=True)
class ImportAttempt:
    """A forbidden name requested while importing ``module``, and what the blocker did."""

    module: str  # the module being checked when it happened
    name: str  # the forbidden name requested
    root: str
    importer: str | None  # the module whose code ran the import
    on_behalf_of: str | None  # the checked or allowed module responsible for it
    blocked: bool

    def __str__(self) -> str:
        verdict = "blocked" if self.blocked else "allowed"
        chain = self.importer
        if self.on_behalf_of != self.importer:
            chain = f"{self.importer}, on behalf of {self.on_behalf_of}"
        return f"{verdict}: {self.name} (forbidden root {self.root}) imported by {chain}"


@dataclass(frozen=True)
class ModuleOutcome:
    """How importing one module went with the forbidden roots blocked."""

    module: str
    error: str | None  # the traceback when the import raised
    attempts: tuple[ImportAttempt, ...]

    @property
    def blocked(self) -> tuple[ImportAttempt, ...]:
        """The forbidden imports the module (or a module it imports) tried to make."""
        return tuple(attempt for attempt in self.attempts if attempt.blocked)

    @property
    def ok(self) -> bool:
        """True when the module imported and nothing it loaded asked for a forbidden name.

        A module that swallows the ImportError (``try: import x except ImportError``) still
        fails: the attempt is what matters.
        """
        return self.error is None and not self.blocked

    def describe(self) -> str:
        lines = [f"{self.module}: {'ok' if self.ok else 'IMPURE'}"]
        lines.extend(f"    {attempt}" for attempt in self.blocked)
        if self.error is not None:
            lines.extend(f"    | {line}" for line in self.error.splitlines())
        return "\n".join(lines)


@dataclass(frozen=True)
class BlockedImportResult:
    """The subprocess that imported the modules, and its parsed report."""

    completed: subprocess.CompletedProcess[str]
    outcomes: dict[str, ModuleOutcome]
    #: Forbidden modules the allowed libraries had already loaded, removed from
    #: ``sys.modules`` before the checked modules were imported.
    purged: tuple[str, ...]

    @property
    def failures(self) -> list[ModuleOutcome]:
        return [outcome for outcome in self.outcomes.values() if not outcome.ok]

    def describe(self) -> str:
        return "\n".join(outcome.describe() for outcome in self.outcomes.values())


def blocked_import_check(
    module_names: Sequence[str],
    *,
    extra_paths: Sequence[Path | str] = (),
    timeout: float = 60.0,
) -> BlockedImportResult:
    """Import each module in a fresh interpreter with the forbidden roots blocked.

    How the subprocess works (see :func:`_harness`):

    1. It imports :data:`ALLOWED_LIBRARIES` and exercises them (:func:`_warm_up`). What
       they load is the baseline: a checked module may import a module of the baseline
       (``pathlib``, which pydantic loads, imports ``urllib.parse``), since it adds
       nothing to what the allowed libraries pull in anyway; but it may not import a
       forbidden module itself, even one the baseline holds (``threading``:
       ``eventsourcing.utils`` needs it).
    2. It removes every forbidden module from ``sys.modules``, keeping a reference so the
       libraries that hold it keep working. A meta-path finder is only consulted on a
       ``sys.modules`` miss, so without this ``import threading`` in a checked module
       would silently succeed.
    3. It installs a finder at the front of ``sys.meta_path``. When a forbidden name is
       requested, it walks the stack to the module responsible: skipping the import
       machinery, and standard-library or third-party modules first loaded during the
       run (a checked module may reach ``threading`` through ``socketserver``), it
       stops at the first frame that is either checked (a module of the checked
       packages, i.e. the top-level packages of ``module_names``) or allowed (the
       baseline, or the allowed libraries' own packages). Checked: it raises
       ImportError and records the attempt. Allowed: the library gets the module it
       asked for (the same object it had, if it was removed).
    4. It imports each module, purging forbidden modules again before each one and on
       each new import made on behalf of a checked module (an allowed library may have
       put one back), and prints a JSON report that this function parses.

    ``extra_paths`` are put on ``PYTHONPATH`` ahead of the project root.
    """
    config = {
        "modules": list(module_names),
        "forbidden": sorted(FORBIDDEN_ROOTS),
        "preimport": list(ALLOWED_LIBRARIES),
        "allowed_roots": list(ALLOWED_LIBRARY_ROOTS),
        "marker": _REPORT_MARKER,
    }
    code = "\n".join(
        [
            "from __future__ import annotations",
            inspect.getsource(_warm_up),
            inspect.getsource(_harness),
            "_harness(_warm_up)",
        ]
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*(str(path) for path in extra_paths), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ in the tree
    completed = subprocess.run(
        [sys.executable, "-c", code, json.dumps(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    report = next(
        (
            json.loads(line.removeprefix(_REPORT_MARKER))
            for line in completed.stdout.splitlines()
            if line.startswith(_REPORT_MARKER)
        ),
        None,
    )
    if completed.returncode != 0 or report is None:
        msg = (
            f"the blocked-import subprocess failed (exit {completed.returncode}) "
            f"without a report\n--- stdout\n{completed.stdout}\n--- stderr\n{completed.stderr}"
        )
        raise RuntimeError(msg)
    outcomes = {
        entry["module"]: ModuleOutcome(
            module=entry["module"],
            error=entry["error"],
            attempts=tuple(ImportAttempt(**attempt) for attempt in entry["attempts"]),
        )
        for entry in report["results"]
    }
    return BlockedImportResult(completed, outcomes, tuple(report["purged"]))


def _warm_up() -> None:
    """Use the allowed libraries the way the pure core does, so that what they load
    lazily (pydantic builds its schema machinery on the first model) is in the baseline.

    Sent to the subprocess as source, like :func:`_harness`.
    """
    from typing import Self

    from eventsourcing.domain import Aggregate, event
    from pydantic import (
        BaseModel,
        ConfigDict,
        Field,
        TypeAdapter,
        ValidationError,
        field_validator,
        model_validator,
    )

    class Model(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        name: str = Field(min_length=1)
        tags: tuple[str, ...] = ()
        ratio: float = 1.0

        @field_validator("name")
        @classmethod
        def _strip(cls, value: str) -> str:
            return value.strip()

        @model_validator(mode="after")
        def _whole(self) -> Self:
            return self

    model = Model.model_validate({"name": " a ", "tags": ["x"]})
    model.model_dump(mode="json")
    model.model_dump_json()
    TypeAdapter(list[int]).validate_python([1, 2])
    try:
        Model(name="")
    except ValidationError as exc:
        str(exc)
        exc.errors()

    class Thing(Aggregate):
        def __init__(self, name: str) -> None:
            self.name = name

        @event("Renamed")
        def rename(self, name: str) -> None:
            self.name = name

    thing = Thing(name="a")
    thing.rename("b")
    thing.collect_events()


def _harness(warm_up: Callable[[], None]) -> None:
    """The subprocess's program: its source is sent with ``python -c``, so it is
    self-contained and imports only what it needs (all of it before the baseline)."""
    import importlib
    import importlib.abc
    import importlib.machinery
    import json
    import sys
    import traceback
    from types import FrameType
    from typing import Any

    config = json.loads(sys.argv[1])
    forbidden = tuple(config["forbidden"])
    allowed_roots = tuple(config["allowed_roots"])
    checked_roots = tuple(sorted({name.partition(".")[0] for name in config["modules"]}))
    machinery = frozenset({"importlib", "importlib._bootstrap", "importlib._bootstrap_external"})

    def under(name: str, roots: tuple[str, ...]) -> str | None:
        matches = [root for root in roots if name == root or name.startswith(root + ".")]
        return max(matches, key=len) if matches else None

    for name in config["preimport"]:
        importlib.import_module(name)
    warm_up()
    baseline = frozenset(sys.modules) - {"__main__"}

    kept: dict[str, Any] = {}

    def purge() -> None:
        for name in list(sys.modules):
            if under(name, forbidden):
                kept[name] = sys.modules.pop(name)

    purge()
    purged = sorted(kept)

    def responsible(frame: FrameType | None) -> tuple[str, str | None, str | None]:
        """('checked' | 'allowed', the module that ran the import, the one answerable)."""
        importer = None
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if name in machinery:
                frame = frame.f_back
                continue
            if importer is None:
                importer = name
            if name is None or name == "__main__" or under(name, checked_roots):
                return "checked", importer, name
            if name in baseline or under(name, allowed_roots):
                return "allowed", importer, name
            frame = frame.f_back  # loaded during the run: answerable is whoever imported it
        return "checked", importer, None

    class Reuse(importlib.abc.Loader):
        """Hands an allowed library the very module object it had before the purge."""

        def __init__(self, module: Any) -> None:
            self.module = module
            self.spec = getattr(module, "__spec__", None)

        def create_module(self, spec: Any) -> Any:
            return self.module

        def exec_module(self, module: Any) -> None:
            if self.spec is not None:
                module.__spec__ = self.spec

    current: dict[str, str | None] = {"module": None}
    attempts: list[dict[str, Any]] = []

    class Blocker:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            verdict, importer, answerable = responsible(sys._getframe(1))
            if verdict == "checked":
                purge()
            root = under(fullname, forbidden)
            if root is None:
                return None
            attempts.append(
                {
                    "module": current["module"],
                    "name": fullname,
                    "root": root,
                    "importer": importer,
                    "on_behalf_of": answerable,
                    "blocked": verdict == "checked",
                }
            )
            if verdict == "checked":
                msg = f"{fullname} is forbidden in the pure core (imported by {importer})"
                raise ImportError(msg, name=fullname)
            if fullname in kept:
                return importlib.machinery.ModuleSpec(fullname, Reuse(kept[fullname]))
            return None

    blocker = Blocker()
    sys.meta_path.insert(0, blocker)
    results: list[dict[str, Any]] = []
    for module in config["modules"]:
        purge()
        current["module"] = module
        first = len(attempts)
        error: str | None
        try:
            importlib.import_module(module)
        except BaseException as exc:
            frames = [
                frame
                for frame in traceback.extract_tb(exc.__traceback__)
                if frame.filename != "<string>" and "importlib" not in frame.filename
            ]
            lines = [*traceback.format_list(frames), *traceback.format_exception_only(exc)]
            error = "".join(lines).rstrip()
        else:
            error = None
        results.append({"module": module, "error": error, "attempts": attempts[first:]})
    sys.meta_path.remove(blocker)
    for name, module in kept.items():
        sys.modules.setdefault(name, module)
    report = {"purged": purged, "results": results}
    print(config["marker"] + json.dumps(report), flush=True)
