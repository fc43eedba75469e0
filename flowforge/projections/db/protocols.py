"""What both backends offer, in full: a :class:`Database` that opens transactions and
says what it can do, and a :class:`Transaction` that runs named statements and returns
rows as dicts. No driver type crosses it, and neither backend leaves a method
unimplemented: what the embedded backend lacks is answered here, once
(:attr:`Database.builds_events`; :meth:`Database.notifier` and :meth:`Database.listener`,
which on SQLite do nothing), so no caller asks which backend it is on."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from flowforge.projections.wakeups import Wakeups

#: A row as a statement returned it: column name to the column's Python value (a UUID,
#: a datetime, decoded JSON, ...). Its values are typed where a row becomes a typed row
#: (``tables.py``) or where one column is read by name; ``Any``, not ``object``, because
#: each of those readers knows its column's type and a cast at every one would say less.
Row = dict[str, Any]
#: What an unread statement gives for each row it returned (``run_each``'s ``unread``):
#: the caller can tell that it wrote, not what. One shared object, never filled in.
UNREAD_ROW: Row = {}
#: A statement's parameters, named like the columns they carry (``sql/*.sql``).
Params = Mapping[str, object]
#: A named statement and its parameters.
Named = tuple[str, Params | None]


class Transaction(Protocol):
    def run(self, name: str, params: Params | None = None, *, commit: bool = False) -> list[Row]:
        """Run the statement called ``name``; its rows (empty for a write with none).
        ``commit``: it is the transaction's last statement, and PostgreSQL sends the
        COMMIT with it (one round trip; nothing may be written after it)."""
        ...

    def run_each(
        self, statements: Sequence[Named], *, commit: bool = False, unread: Collection[int] = ()
    ) -> list[list[Row]]:
        """Run the ``(name, params)`` statements in order (PostgreSQL: in one round trip,
        so none may depend on another's rows); the rows of each. ``commit`` as for
        :meth:`run`. ``unread``: the positions of statements whose rows the caller does
        not read; theirs come back as one ``UNREAD_ROW`` per row, not loaded (a run
        row's definition JSON was most of a batch's client CPU)."""
        ...

    def defer(self, name: str, params: Params | None = None) -> None:
        """Run the statement called ``name``, whose rows nobody reads, in this transaction
        before anything that follows it (PostgreSQL sends it with the next statement or
        the COMMIT: one round trip fewer; its error surfaces there)."""
        ...

    def defer_many(self, name: str, params: Sequence[Params]) -> None:
        """:meth:`defer` the statement called ``name`` once for each of ``params``, in
        order (SQLite: in one ``executemany``, the statement prepared once)."""
        ...

    def run_script(self, name: str) -> None:
        """Run every statement of a multi-statement block (DDL), without parameters."""
        ...


class Notifier(Protocol):
    """Tells other processes that a commit left them work (``wakeups.py``)."""

    def request(self, statement: str) -> None:
        """Ask for ``notify_run_wakeups`` or ``notify_outbox`` to be sent soon; never
        blocks, never raises."""
        ...

    def close(self) -> None: ...


class Listener(Protocol):
    """Rings this process's bells on other processes' commits until closed."""

    def wait_listening(self, timeout: float) -> bool:
        """True once it hears other processes (at most ``timeout`` seconds' wait)."""
        ...

    def close(self) -> None: ...


class Database(Protocol):
    #: The backend's name, for people and for loading its SQL (``sql/<dialect>.sql``);
    #: never a reason to branch (what differs is a method or a value of this protocol).
    dialect: str
    location: str
    #: Whether a statement can store an event built from the row it wrote (PostgreSQL's
    #: data-modifying CTEs: the ``*_recorded`` statements). Without it the event is
    #: built in Python from the returned row and inserted after it (``writes/recording``).
    builds_events: bool

    def transaction(self) -> AbstractContextManager[Transaction]:
        """A write transaction that commits when its block ends, or rolls back."""
        ...

    def read(self) -> AbstractContextManager[Transaction]:
        """A transaction for queries only."""
        ...

    def notifier(self) -> Notifier:
        """This process's way to wake other processes after a commit: PostgreSQL's
        NOTIFY, on a connection of its own; on SQLite (one process: the in-process bells
        are the whole story) one that does nothing. Close it with the store."""
        ...

    def listener(self, wakeups: Wakeups) -> Listener:
        """Started: other processes' commits ring ``wakeups`` until it is closed
        (PostgreSQL's LISTEN, on a connection of its own, to the listen URL when one is
        set: a LISTEN needs a session of its own on the server, which a
        transaction-pooling PgBouncer cannot give); on SQLite one that does nothing."""
        ...

    def archiver_lock(self) -> AbstractContextManager[bool]:
        """Held for the block: True if this process is now the database's one archiver,
        False if another holds the lock (``flowforge db archive``, app/archive.py).
        PostgreSQL's session advisory lock, on a connection of its own (freed with it,
        even by a killed process); on SQLite an exclusive file lock beside the database
        file (freed by the kernel when its holder dies)."""
        ...
