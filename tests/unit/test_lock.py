"""requirements.lock pins every dependency pyproject.toml names, at a version its range
allows: the install of the Makefile, .ci/run and the README is the lock, so a
dependency added to pyproject.toml but not locked would be missing on a fresh machine
(docs/testing.md, "The lock file")."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

#: ``name==version`` at the start of a line (markers and hashes may follow).
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def pins(lock_text: str) -> dict[str, Version]:
    return {canonicalize_name(name): Version(version) for name, version in _PIN.findall(lock_text)}


def declared(pyproject: Mapping[str, object]) -> list[Requirement]:
    """The runtime dependencies and every extra's, less the project's own extras."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    own = canonicalize_name(project["name"])
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    every = [*project["dependencies"], *(r for group in extras.values() for r in group)]
    requirements = [Requirement(text) for text in every]
    return [r for r in requirements if canonicalize_name(r.name) != own]


def problems(requirements: Iterable[Requirement], locked: Mapping[str, Version]) -> list[str]:
    """Each requirement the lock leaves out, or pins outside its range."""
    found = []
    for requirement in requirements:
        version = locked.get(canonicalize_name(requirement.name))
        if version is None:
            found.append(f"{requirement.name}: not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            found.append(f"{requirement.name}: locked at {version}, outside {requirement}")
    return found


def test_the_lock_pins_every_dependency_of_pyproject_within_its_range() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    locked = pins((ROOT / "requirements.lock").read_text())
    requirements = declared(pyproject)
    assert len(requirements) > 10  # the runtime dependencies and the dev extra, read
    assert problems(requirements, locked) == [], "run `make lock` (docs/testing.md)"


def test_the_lock_pins_every_line_with_hashes() -> None:
    """`pip install --require-hashes` refuses a lock with one line unhashed."""
    text = (ROOT / "requirements.lock").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    pinned = [entry for entry in entries if _PIN.match(entry)]
    assert len(pinned) == len(pins(text))
    assert [entry.split()[0] for entry in pinned if "--hash=sha256:" not in entry] == []


def test_a_missing_or_out_of_range_pin_is_reported() -> None:
    pyproject = {
        "project": {
            "name": "flowforge",
            "dependencies": ["pika>=1.3,<2", "psycopg[binary]>=3.2"],
            "optional-dependencies": {"dev": ["flowforge[otel]", "pytest>=8"]},
        }
    }
    locked = pins("pika==2.0.1 \\\n    --hash=sha256:00\npsycopg==3.3.9 ; os_name != 'nt'\n")
    assert problems(declared(pyproject), locked) == [
        "pika: locked at 2.0.1, outside pika<2,>=1.3",
        "pytest: not in the lock",
    ]
