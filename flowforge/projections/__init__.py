"""The projected current-state tables, their SQL, and the two database backends.

``projections`` owns every table and every statement: the schema and its migrations,
the conditional writes of the transition protocol, the function that applies an event
to the rows, and the queries the processes read. SQL lives in ``sql/``: one shared file
per concept, and ``<dialect>.sql`` for what differs (``statements.py``). What FlowForge
assumes about the ``eventsourcing`` library's stored events is in ``event_log.py``.
"""
