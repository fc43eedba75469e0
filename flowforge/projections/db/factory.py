"""The ``eventsourcing`` library's PostgreSQL infrastructure with FlowForge's connection
settings, and the settings (environment keys) a database URL passes it."""

from __future__ import annotations

from eventsourcing.postgres import PostgresFactory
from eventsourcing.utils import Environment, EnvType

#: The eventsourcing setting (environment key) under which the URL's other libpq
#: parameters travel to :class:`FlowForgePostgresFactory`, as a conninfo string.
LIBPQ_OPTIONS = "FLOWFORGE_LIBPQ_OPTIONS"
#: The eventsourcing setting that turns server-side prepared statements off ("n").
PREPARED_STATEMENTS = "FLOWFORGE_PREPARED_STATEMENTS_OPTION"
#: Executions of a statement on one connection before psycopg prepares it (its default).
PREPARE_THRESHOLD = 5


class FlowForgePostgresFactory(PostgresFactory):
    """The library's PostgreSQL infrastructure, with FlowForge's connection settings.

    Server-side prepared statements are on (psycopg prepares a statement once it has run
    ``PREPARE_THRESHOLD`` times on a connection): parsing and planning FlowForge's
    statements on every execution is a large share of a cycle's server work
    (docs/performance.md, "Design choices that buy the speed"). They are off
    (``prepare_threshold=None``; the library's ``prepare=True`` on its reads too) when
    ``PREPARED_STATEMENTS`` says so: a prepared statement lives in one server session, and
    behind PgBouncer in transaction pooling mode (1.18, Debian 12's, does not track them)
    the next transaction runs in another session: "prepared statement _pg3_0 does not
    exist" (docs/architecture.md, "Through PgBouncer"). The URL's other libpq parameters
    (``LIBPQ_OPTIONS``) reach every connection the pool opens.
    """

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        # Before the pool opens its first connection: the library opens it lazily.
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict), "the library passes its pool a dict of kwargs"
        prepared = self.env.get(PREPARED_STATEMENTS) != "n"
        kwargs["prepare_threshold"] = PREPARE_THRESHOLD if prepared else None
        # The library's settings carry host, port, database, user and password only. The
        # rest of the URL (``target_session_attrs=read-write``, which makes every new
        # connection skip hosts that are standbys and so find the primary after a
        # failover; ``sslmode``; ...) is given to each connection the pool opens.
        self.datastore.pool.conninfo = self.env.get(LIBPQ_OPTIONS) or ""
