"""SQL as data: the named blocks of ``sql/<dialect>.sql``, loaded once per dialect."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from flowforge.aggregates.states import TaskRunState, WorkflowRunState

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)

#: Microseconds since the epoch by SQLite's clock (julianday is exact to the millisecond).
_SQLITE_NOW = "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS integer) * 1000)"


def _quoted(values: list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _macros(dialect: str) -> dict[str, str]:
    # The state CHECKs are filled from the enums, so the schema cannot drift from them.
    return {
        "task_run_states": _quoted([s.value for s in TaskRunState]),
        "workflow_run_states": _quoted([s.value for s in WorkflowRunState]),
        "now": _SQLITE_NOW if dialect == "sqlite" else "now()",
    }


@cache
def load(dialect: str) -> Mapping[str, str]:
    """The statements of ``dialect`` ("postgres" or "sqlite") by name."""
    text = resources.files("flowforge.projections").joinpath(f"sql/{dialect}.sql").read_text()
    parts = _BLOCK.split(text)
    macros = _macros(dialect)
    blocks = {
        name: _strip_comments(body).format_map(macros)
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }
    return MappingProxyType(blocks)


def statements(block: str) -> list[str]:
    """A multi-statement block split into its statements (no ``;`` inside our SQL)."""
    return [s.strip() for s in block.split(";") if s.strip()]


def _strip_comments(body: str) -> str:
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()
