"""FlowForge's own claim+finish statements, replayed by the least client there is.

``bench.claim_finish`` compares FlowForge with pgbench running *simpler* SQL (two
UPDATEs, two event INSERTs). This module answers the other question: what do the
statements FlowForge really sends cost, without FlowForge's Python around them?

:func:`capture_cycle` records the round trips of one real claim+finish cycle, exactly as
FlowForge sends them (statement names, bodies, parameters as dumped). They are then
replayed for other task runs, with only the task run's id, its run's id and its key
swapped in, by two clients:

* pgbench (C): each round trip as one ``\\startpipeline`` ... ``\\endpipeline`` of the
  same prepared statements, the parameters out of band, as FlowForge sends them; the
  task's ids are read first with one autocommitted ``SELECT`` (``\\gset`` cannot be used
  in a pipeline), one round trip per cycle that FlowForge does not make;
* Python, bare: the same pipelines through FlowForge's own libpq pipeline
  (``pipeline._pipeline``), the parameters already dumped: no pool, no transaction
  object, no statements built, no rows loaded.

Every replayed cycle takes the fencing token the captured claim took (1: each task run is
claimed once), and the caller checks that every replayed task run succeeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg import pq

from flowforge.app.service import FlowForge
from flowforge.projections.db import pipeline

#: The table pgbench reads a cycle's task run from: client c owns k = c * 1000000 + n.
CREATE_KEYS = """
DROP TABLE IF EXISTS bench_replay_keys;
CREATE TABLE bench_replay_keys (
    k bigint PRIMARY KEY, task_run_id uuid NOT NULL, workflow_run_id uuid NOT NULL,
    task_key text NOT NULL)
"""
DROP_KEYS = "DROP TABLE IF EXISTS bench_replay_keys"
COPY_KEYS = "COPY bench_replay_keys FROM STDIN"
SELECT_KEYS = "SELECT id, workflow_run_id, task_key FROM task_runs WHERE id = ANY(%s)"
COUNT_SUCCEEDED = "SELECT count(*) FROM task_runs WHERE id = ANY(%s) AND state = 'succeeded'"
READ_KEYS = (
    "SELECT task_run_id AS tid, workflow_run_id AS rid, task_key AS tk "
    "FROM bench_replay_keys WHERE k = :k \\gset\n"
)
#: pgbench's variables for the swapped values (the rest are variables v0, v1, ...).
_KEY_VARIABLES = ("tid", "rid", "tk")


@dataclass(frozen=True, slots=True)
class Query:
    """One statement of a round trip as FlowForge sent it (already prepared by then)."""

    name: bytes
    body: bytes
    values: tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """What a replayed cycle swaps in, as FlowForge dumps it (a UUID as 32 hex digits)."""

    task_run_id: bytes
    workflow_run_id: bytes
    task_key: bytes

    @classmethod
    def of(cls, task_run_id: UUID, workflow_run_id: UUID, task_key: str) -> TaskKeys:
        return cls(task_run_id.hex.encode(), workflow_run_id.hex.encode(), task_key.encode())

    def swaps(self, into: TaskKeys) -> dict[bytes, bytes]:
        """Each of these keys' dumped values to ``into``'s."""
        return {
            self.task_run_id: into.task_run_id,
            self.workflow_run_id: into.workflow_run_id,
            self.task_key: into.task_key,
        }


def capture_cycle(
    ff: FlowForge, task_run_id: UUID, worker_id: str, result: Any
) -> list[list[Query]]:
    """The round trips of one claim and succeed of ``task_run_id`` as FlowForge sent
    them (the replay prepares each statement itself)."""
    sent: list[list[Query]] = []
    original = pipeline._pipeline

    def recording(conn: Any, session: Any, batch: Sequence[Any]) -> Any:
        sent.append([_recorded(query) for query in batch])
        return original(conn, session, batch)

    pipeline._pipeline = recording
    try:
        claim = ff.claim_task_run(task_run_id, worker_id, 300.0)
        if claim is None or not ff.finish_task_run(
            task_run_id, claim.fencing_token, "succeed", result
        ):
            raise RuntimeError(f"the captured cycle of {task_run_id} lost a race")
    finally:
        pipeline._pipeline = original
    return sent


def _recorded(query: Any) -> Query:
    if query.name is None:
        raise RuntimeError(f"an unprepared statement cannot be replayed: {query.body!r}")
    if query.formats and any(f != pq.Format.TEXT for f in query.formats):
        raise RuntimeError("a binary parameter cannot be replayed by pgbench")
    values = tuple(None if v is None else bytes(v) for v in query.values or ())
    return Query(query.name, query.body, values)


def task_keys(conn: psycopg.Connection[Any], ids: Sequence[UUID]) -> list[TaskKeys]:
    """Each task run's keys, in the order of ``ids``."""
    rows = {row[0]: row for row in conn.execute(SELECT_KEYS, (list(ids),))}
    return [TaskKeys.of(*rows[task_run_id]) for task_run_id in ids]


def pgbench_script(
    round_trips: list[list[Query]], captured: TaskKeys
) -> tuple[str, dict[str, str]]:
    """The cycle as a pgbench script, and the ``--define`` variables it needs (every
    value a variable, so pgbench sends it as a parameter, as FlowForge does)."""
    variables: dict[str, str] = {}
    named = dict(
        zip(
            (captured.task_run_id, captured.workflow_run_id, captured.task_key),
            _KEY_VARIABLES,
            strict=True,
        )
    )

    def argument(value: bytes | None) -> str:
        if value is None:
            return "NULL"
        if value not in named:
            named[value] = f"v{len(variables)}"
            variables[named[value]] = value.decode()
        return f":{named[value]}"

    lines = ["\\set n :n + 1", "\\set k :client_id * 1000000 + :n", READ_KEYS.rstrip()]
    for trip in round_trips:
        lines.append("\\startpipeline")
        for query in trip:
            body = query.body.decode().strip().rstrip(";")
            for i in range(len(query.values), 0, -1):  # $10 before $1
                body = body.replace(f"${i}", argument(query.values[i - 1]))
            lines.append(" ".join(body.split()) + ";")
        lines.append("\\endpipeline")
    return "\n".join(lines) + "\n", variables


class BareClient:
    """The replayed cycle on one connection, straight through libpq."""

    def __init__(self, url: str, round_trips: list[list[Query]], captured: TaskKeys) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._round_trips = round_trips
        self._captured = captured
        self._session = pipeline._session(self._conn)
        pgconn = self._conn.pgconn
        for query in {q.name: q for trip in round_trips for q in trip}.values():
            prepared = pgconn.prepare(query.name, query.body)
            if prepared.status != pq.ExecStatus.COMMAND_OK:
                raise RuntimeError(prepared.error_message.decode())

    def close(self) -> None:
        self._conn.close()

    def cycle(self, keys: TaskKeys) -> bool:
        """The claim's round trip, then the finish's; whether the finish won. Each goes
        through FlowForge's own pipeline (``pipeline._pipeline``: libpq's calls, one
        Sync), so only what FlowForge builds around it is left out."""
        swaps = self._captured.swaps(keys)
        results: list[pq.abc.PGresult] = []
        for trip in self._round_trips:
            queries = [
                pipeline._Query(
                    q.name, q.body, [v if v is None else swaps.get(v, v) for v in q.values]
                )
                for q in trip
            ]
            results = pipeline._pipeline(self._conn, self._session, queries)
        # The finish's task row comes back from the round trip's second statement.
        return bool(results[1].ntuples)
