"""What the commands share: settings from the environment and flags, opening the
application service, and turning command-line text into values (inputs, workflows,
task modules). Every problem is a ``FlowForgeError`` with a one-line message, so ``main``
prints it without a traceback."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from flowforge import config, errors, observers
from flowforge.aggregates import json_values
from flowforge.aggregates.definition import WorkflowDefinition
from flowforge.app.definition_files import load_definition
from flowforge.app.service import FlowForge
from flowforge.cli.parser import UsageError
from flowforge.processes.registry import TaskRegistry

#: ``package.module:attribute`` (the attribute may be dotted), as for console scripts.
_MODULE_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


#: The embedded default's file (``./.flowforge/flowforge.db``).
_DEFAULT_FILE = Path(unquote(urlsplit(config.DEFAULT_DATABASE_URL).path[1:]))

# --- settings and the application service --------------------------------------------


def settings_from(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> config.Settings:
    """The environment's settings, with ``--database-url`` / ``--broker-url`` overriding.
    A flag given empty is an error, not the default: ``--database-url "$URL"`` with the
    variable unset would otherwise run against another database without a word."""
    for name in ("database_url", "broker_url"):
        value = getattr(args, name, None)
        if value is not None and not value.strip():
            option = "--" + name.replace("_", "-")
            raise UsageError(
                f"{option} is empty: give a URL, or leave {option} out for the default"
            )
    merged = dict(environ)
    if getattr(args, "database_url", None):
        merged[config.DATABASE_URL_VARIABLE] = args.database_url
    if getattr(args, "broker_url", None):
        merged[config.BrokerConfig.ENVIRONMENT["url"]] = args.broker_url
    flag = "--broker-url" if getattr(args, "broker_url", None) else None
    return config.Settings.from_env(merged, broker_url_setting=flag)


def serve_metrics(args: argparse.Namespace, app: FlowForge, *, backlog: bool = False) -> None:
    """With ``--metrics-port``: serve this process's metrics (docs/observability.md), and
    with ``backlog`` the database's (tasks by state, the outbox): one process's job, the
    scheduler's, so that a scrape of every worker does not query the database."""
    port: int | None = getattr(args, "metrics_port", None)
    if port is None:
        return
    try:
        observers.install(metrics_port=port, backlog=app.backlog if backlog else None)
    except OSError as exc:
        raise UsageError(
            f"--metrics-port {port}: cannot listen on it ({exc.strerror or exc}); choose "
            f"a free port, one per process on a machine"
        ) from None


def open_app(settings: config.Settings, *, migrate: bool = False) -> FlowForge:
    """The application service on the configured database.

    Only ``db init`` / ``db migrate``, ``run`` and ``demo`` pass ``migrate=True`` (create
    the schema, apply missing migrations). Every other command only checks the schema
    version and refuses with the command to run; it never creates a SQLite file.
    """
    if migrate and settings.database_url == config.DEFAULT_DATABASE_URL:
        # The embedded default lives in ./.flowforge/; nobody should have to create it.
        _DEFAULT_FILE.parent.mkdir(parents=True, exist_ok=True)
    return FlowForge(
        settings.database_url,
        migrate=migrate,
        listen_database_url=settings.listen_database_url,
        prepared_statements=settings.prepared_statements,
    )


def default_database_missing(settings: config.Settings) -> bool:
    """True if the settings name the embedded default and nothing has created it yet."""
    return settings.database_url == config.DEFAULT_DATABASE_URL and not _DEFAULT_FILE.exists()


def program_name() -> str:
    """How to call this ``flowforge`` from the user's shell: ``flowforge`` when that is
    what the shell finds, else the path of this installation's script (a virtualenv's
    ``.venv/bin/flowforge``, not on the PATH until it is activated)."""
    script = Path(sys.executable).with_name("flowforge")
    if not script.exists() or shutil.which("flowforge") == str(script):
        return "flowforge"
    relative = os.path.relpath(script)
    return relative if len(relative) < len(str(script)) else str(script)


def program(args: argparse.Namespace) -> str:
    """``flowforge`` (:func:`program_name`) with the flags that find this database and
    broker again, for the commands printed to paste (an environment variable or the
    default needs none)."""
    flags = [
        f" {flag} {shlex.quote(value)}"
        for flag, value in (
            ("--database-url", getattr(args, "database_url", None)),
            ("--broker-url", getattr(args, "broker_url", None)),
        )
        if value
    ]
    return program_name() + "".join(flags)


def handler_modules(args: argparse.Namespace) -> list[str]:
    """The modules that registered a ``run``'s handlers: ``--tasks``, and the module of
    a ``module:attr`` workflow."""
    workflow = getattr(args, "workflow", None) or ""
    own = [workflow.partition(":")[0]] if _is_module_reference(workflow) else []
    return [*args.tasks, *(m for m in own if m not in args.tasks)]


# --- values from the command line ----------------------------------------------------


#: What makes a VALUE JSON rather than a plain string: it opens an object, a list or a
#: quoted string, is a literal, or is a number (including forms JSON itself rejects,
#: such as ``+1`` or ``.5``, so they are refused rather than silently kept as text).
_LOOKS_LIKE_JSON = re.compile(
    r"^\s*(?:[\[{\"]|(?:true|false|null|NaN|-?Infinity)\s*$"
    r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$)"
)


def parse_inputs(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each key once.

    The rule (docs/cli.md): a VALUE that looks like JSON (starts with ``{``, ``[`` or
    ``"``, is ``true``/``false``/``null``, or is a number) must parse as JSON, with finite
    numbers only; anything else (a word, a path, a date) is a string as written. So a
    truncated list is an error, never a string that only looks like the list.
    """
    inputs: dict[str, Any] = {}
    for pair in pairs:
        key, separator, raw = pair.partition("=")
        if not separator or not key:
            raise UsageError(f"--input {pair!r}: expected KEY=VALUE, e.g. --input rows=8")
        if key in inputs:
            raise UsageError(
                f"--input {key}: given more than once; pass each key once "
                f"(a list is one JSON value: {key}='[1, 2]')"
            )
        inputs[key] = _input_value(key, raw)
    return inputs


def _input_value(key: str, raw: str) -> Any:
    if not _LOOKS_LIKE_JSON.match(raw):
        return raw

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not a number a run can store")

    try:
        value = json.loads(raw, parse_constant=refuse)
        json.dumps(value, allow_nan=False)  # 1e999 parses as inf: refuse it too
    except (ValueError, RecursionError) as exc:
        raise UsageError(
            f"--input {key}={raw.strip()[:40]}: looks like JSON but is not valid JSON "
            f"({_first_line(exc)}); fix it, or quote it to pass the text: "
            f"{key}='\"...\"'"
        ) from exc
    if problem := json_values.nesting_problem(value):
        raise UsageError(
            f"--input {key}: {problem}; a run stores at most {json_values.MAX_NESTING}"
        )
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_workflow(source: str) -> WorkflowDefinition:
    """A validated definition from a ``.toml``/``.json`` file or a ``module:attr``.

    The attribute may be a definition, a mapping, a path, or a callable returning one.
    """
    if not _is_module_reference(source):
        return load_definition(source)
    module_name, _, attribute = source.partition(":")
    value: Any = import_user_module(module_name, "workflow module")
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{source}: module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, type):
        value = value()
    try:
        return load_definition(value)
    except errors.InvalidWorkflowDefinitionError as exc:
        lines = str(exc).splitlines()
        raise errors.InvalidWorkflowDefinitionError(
            "\n".join(f"{source}: {line}" for line in lines)
        ) from exc


def _is_module_reference(source: str) -> bool:
    return not os.path.exists(source) and _MODULE_REFERENCE.match(source) is not None


def import_user_module(name: str, purpose: str) -> ModuleType:
    """Import a module of the user's (handlers, workflows), from the working directory
    or the installed packages; a failure is one line naming the module."""
    # The console script's sys.path starts with its bin/ directory, not the working
    # directory (as ``python -m`` does): add it, so `--tasks examples.tasks` works there.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if name.endswith(".py") or os.sep in name:
        module = name.removesuffix(".py").replace(os.sep, ".").strip(".")
        raise UsageError(
            f"cannot import {purpose} {name!r}: give a module name, not a file: "
            f"{module!r} (run from the directory that holds it)"
        )
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(f"{exc.name}.")):
            raise UsageError(
                f"cannot import {purpose} {name!r}: no module named {exc.name!r} in the "
                f"working directory or the installed packages; check the name and PYTHONPATH"
            ) from exc
        raise UsageError(f"cannot import {purpose} {name!r}: {exc}") from exc
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UsageError(
            f"cannot import {purpose} {name!r}: it raised {type(exc).__name__}"
            f"{': ' + first if first else ''}"
        ) from exc


def import_task_modules(names: Sequence[str], registry: TaskRegistry) -> None:
    """Import each ``--tasks`` module, so its ``@task`` decorators fill the registry."""
    for name in names:
        import_user_module(name, "task module")
    if names and len(registry) == 0:
        raise UsageError(
            f"the task module(s) {', '.join(names)} registered no handlers; decorate "
            f"handlers with @flowforge.task('type') in them"
        )


def check_task_types(definition: WorkflowDefinition, registry: TaskRegistry) -> None:
    """Refuse a workflow whose task types no handler in ``registry`` runs."""
    missing = [t for t in definition.tasks if t.type not in registry]
    if not missing:
        return
    names = ", ".join(f"{t.key!r} (type {t.type!r})" for t in missing)
    registered = ", ".join(registry) or "none; pass the module that defines them with --tasks"
    raise errors.UnknownTaskTypeError(
        f"workflow {definition.name!r}: no handler is registered for task {names}; "
        f"registered types: {registered}"
    )
