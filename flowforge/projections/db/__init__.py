"""The two database backends behind one interface: PostgreSQL and SQLite.

A :class:`~flowforge.projections.db.protocols.Database` opens transactions; a
:class:`~flowforge.projections.db.protocols.Transaction` runs named statements from
``sql/<dialect>.sql`` with parameters named like the columns they carry, and returns rows
as plain dicts of Python values. Everything that differs between the backends (parameter
and value encoding, how a write transaction begins, driver errors) is in this package,
side by side; no other module branches on the dialect.

- ``protocols.py``: the interface both backends implement in full. What SQLite lacks
  is answered there, once: ``builds_events``, and a notifier and a listener that do
  nothing (``wakeups.InProcessOnly``), so no caller asks which backend it is on.
- ``postgres.py``: PostgreSQL's transactions and reads, and how a dead pooled connection
  is found and replaced; ``pipeline.py``: its round trip, one libpq pipeline.
- ``sqlite.py``: the embedded backend.
- ``errors.py``: driver errors become FlowForge's, in one place.
- ``location.py``: a database URL read; ``factory.py``: the ``eventsourcing`` settings it
  becomes; ``connect.py``: a backend over the recorder's datastore, the schema lock.

Both backends borrow the connection pool of the ``eventsourcing`` recorder, so the event
store and the projected tables share connections and every write is one transaction.
"""
