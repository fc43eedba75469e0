"""One database protocol, implemented in full by both backends, and no caller that asks
which backend it is on (pure: nothing is opened)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import cast

from eventsourcing.sqlite import SQLiteDatastore

import flowforge
from flowforge.projections.db import postgres, protocols, sqlite
from flowforge.projections.wakeups import InProcessOnly, Wakeups

#: What asks which backend it is on: a comparison of the dialect, an isinstance of a
#: backend or its datastore, a hasattr probe of the database.
CAPABILITY_BRANCH = re.compile(
    r"dialect\s*(==|!=|\bin\b|\bnot in\b)"
    r"|isinstance\([^)]*(PostgresDatabase|SqliteDatabase|Datastore)"
    r"|hasattr\([^)]*(database|datastore)"
)
PACKAGE = Path(flowforge.__file__).parent
#: Where the backends may differ: the backends themselves, and the loader of
#: ``sql/<dialect>.sql`` (which picks the dialect's file and parameter style by name).
ALLOWED = (PACKAGE / "projections" / "db", PACKAGE / "projections" / "statements.py")


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    return names | {n for n, v in vars(protocol).items() if inspect.isfunction(v)}


def test_both_backends_have_every_member_of_the_protocols() -> None:
    for protocol, backends in (
        (protocols.Database, (postgres.PostgresDatabase, sqlite.SqliteDatabase)),
        (protocols.Transaction, (postgres._PostgresTransaction, sqlite._SqliteTransaction)),
    ):
        for backend in backends:
            missing = {name for name in _members(protocol) if not hasattr(backend, name)}
            missing -= {"location"}  # set per instance, in __init__
            assert not missing, f"{backend.__name__} lacks {missing}"


def test_no_backend_leaves_a_method_unimplemented() -> None:
    for module in (postgres, sqlite):
        assert "NotImplementedError" not in inspect.getsource(module), module.__name__


def test_what_the_embedded_backend_lacks_it_answers_with_a_no_op() -> None:
    database = sqlite.SqliteDatabase(cast(SQLiteDatastore, object()), "test.db")
    notifier, listener = database.notifier(), database.listener(Wakeups())
    assert isinstance(notifier, InProcessOnly) and isinstance(listener, InProcessOnly)
    notifier.request("notify_outbox")  # nothing to send, nothing raised
    assert listener.wait_listening(0.0)  # nothing to wait for
    listener.close()
    assert not database.builds_events


def test_no_module_outside_the_backends_branches_on_the_backend() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == allowed or allowed in path.parents for allowed in ALLOWED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if CAPABILITY_BRANCH.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_the_branch_finder_finds_a_branch() -> None:
    assert CAPABILITY_BRANCH.search('return location.dialect == "sqlite"')
    assert CAPABILITY_BRANCH.search("if isinstance(datastore, PostgresDatastore):")
    assert not CAPABILITY_BRANCH.search('print(f"database {database.dialect}")')
