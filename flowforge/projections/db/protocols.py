"""What both backends offer: a :class:`Database` that opens transactions, and a
:class:`Transaction` that runs named statements and returns rows as dicts."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import psycopg

Row = dict[str, Any]
#: What an unread statement gives for each row it returned (``run_each``'s ``unread``):
#: the caller can tell that it wrote, not what. One shared object, never filled in.
UNREAD_ROW: Row = {}
#: A named statement (``sql/*.sql``) and its parameters.
Named = tuple[str, Mapping[str, Any] | None]


class Transaction(Protocol):
    def run(
        self, name: str, params: Mapping[str, Any] | None = None, *, commit: bool = False
    ) -> list[Row]:
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

    def defer(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Run the statement called ``name``, whose rows nobody reads, in this transaction
        before anything that follows it (PostgreSQL sends it with the next statement or
        the COMMIT: one round trip fewer; its error surfaces there)."""
        ...

    def run_script(self, name: str) -> None:
        """Run every statement of a multi-statement block (DDL), without parameters."""
        ...


class Database(Protocol):
    dialect: str
    location: str
    #: Whether a commit can wake another process (PostgreSQL's NOTIFY).
    notifies: bool
    #: Whether a statement can store an event built from the row it wrote (PostgreSQL's
    #: data-modifying CTEs: the ``*_recorded`` statements).
    builds_events: bool

    def transaction(self) -> Any:
        """A context manager yielding a :class:`Transaction` that commits on success."""
        ...

    def read(self) -> Any:
        """A context manager yielding a :class:`Transaction` for queries only."""
        ...

    def notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to send NOTIFY; only where
        ``notifies`` (PostgreSQL)."""
        ...

    def listen_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection outside the pool, to LISTEN on; only where
        ``notifies``. It goes to the listen URL when one is set (a LISTEN needs a session
        of its own on the server, which a transaction-pooling PgBouncer cannot give)."""
        ...
