"""The migration files' names, in order (``sql/migrations/NNN_<what>.sql``): what the
schema's version counts. Light on purpose (no SQL is read, nothing else is imported), so
``flowforge --help`` can name the current version without loading the statements."""

from __future__ import annotations

from importlib import resources


def migration_files() -> list[str]:
    folder = resources.files("flowforge.projections").joinpath("sql/migrations")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


#: The schema's version: how many migrations there are (``projections/schema.py``
#: checks the database against it; ``flowforge db --help`` names it).
SCHEMA_VERSION = len(migration_files())
