"""What the feed costs the write path (docs/feed.md, "Cost"): claim+finish cycles on
PostgreSQL with the feed's machinery on and off, in alternating rounds.

    python -m bench.feed_cost                       # 9 rounds of 400 cycles, ~2 minutes
    python -m bench.feed_cost --rounds 10 --cycles 1000

The feed adds to every event insert its key (a BEFORE INSERT trigger reading the
aggregate's previous event through the primary key) and an entry in the feed's index
``(transaction_id, notification_id)`` (migration 18). "Off" disables the trigger and
drops the index on the same database; "index" keys events by their transaction's id
alone (a column default) with the index; "on" is the feed as shipped. Rounds rotate
(off, index, on, off, ...) so that a neighbour's load falls on all alike; each round
claims and finishes its own READY tasks, one cycle at a time, in one process.

Reported per mode: the median round's wall time per cycle, the client's CPU per cycle
(``process_time``) and the server's: the CPU time of the PostgreSQL backends serving
this database (``/proc/<pid>/schedstat``, nanoseconds; the server must run on this
machine), and the "on" / "off" ratio of each. CPU times, unlike the wall time, hardly
move with a neighbour's load (a loaded machine slows a cycle, not the work in it), so
they are the measure; the machine is shared and wall times are noisy. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

import psycopg

from flowforge.app.service import FlowForge

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
WIDTH = 100  # tasks per workflow: all READY at once
_INDEX = (
    "CREATE INDEX IF NOT EXISTS flowforge_events_feed_idx "
    "ON flowforge_events (transaction_id, notification_id)"
)
#: What each mode runs first: "off" (no key, no index), "index" (the transaction's id
#: as the key, by a column default, without the trigger: the index's own cost), "on".
MODES = {
    "off": (
        "ALTER TABLE flowforge_events DISABLE TRIGGER flowforge_events_feed_key",
        "ALTER TABLE flowforge_events ALTER COLUMN transaction_id SET DEFAULT 0",
        "DROP INDEX IF EXISTS flowforge_events_feed_idx",
    ),
    "index": (
        "ALTER TABLE flowforge_events DISABLE TRIGGER flowforge_events_feed_key",
        "ALTER TABLE flowforge_events ALTER COLUMN transaction_id SET DEFAULT txid_current()",
        _INDEX,
    ),
    "on": (
        "ALTER TABLE flowforge_events ENABLE TRIGGER flowforge_events_feed_key",
        "ALTER TABLE flowforge_events ALTER COLUMN transaction_id SET DEFAULT 0",
        _INDEX,
    ),
}


@dataclass
class Round:
    mode: str
    wall_s: float
    client_s: float
    server_s: float
    cycles: int


def backend_cpu(conn: psycopg.Connection) -> dict[int, float]:
    """Each backend serving this database (but ``conn``'s own): its CPU seconds so far."""
    pids = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()"
    ).fetchall()
    found = {}
    for (pid,) in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as stat:
                found[pid] = int(stat.read().split()[0]) / 1e9
        except OSError:
            continue
    return found


def ready_tasks(app: FlowForge, count: int) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    while len(ids) < count:
        definition = {
            "name": "feed_cost",
            "tasks": [{"key": f"t{i}", "type": "noop"} for i in range(WIDTH)],
        }
        run_id = app.start_workflow_run(definition)
        ids += [task.id for task in app.task_runs(run_id)]
    return ids[:count]


def one_round(app: FlowForge, url: str, mode: str, cycles: int) -> Round:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in MODES[mode]:
            conn.execute(statement)
        tasks = ready_tasks(app, cycles)
        server, client, wall = backend_cpu(conn), time.process_time(), time.perf_counter()
        for task_run_id in tasks:
            claim = app.claim_task_run(task_run_id, "bench", 60.0)
            assert claim is not None
            assert app.finish_task_run(task_run_id, claim.fencing_token, "succeed")
        wall, client = time.perf_counter() - wall, time.process_time() - client
        after = backend_cpu(conn)
    server_s = sum(seconds - server.get(pid, 0.0) for pid, seconds in after.items())
    return Round(mode, wall, client, server_s, cycles)


def report(rounds: list[Round]) -> None:
    medians = {}
    for mode in MODES:
        mine = [r for r in rounds if r.mode == mode]
        medians[mode] = [
            statistics.median(getattr(r, name) / r.cycles * 1e6 for r in mine)
            for name in ("wall_s", "client_s", "server_s")
        ]
        wall, client, server = medians[mode]
        print(
            f"feed {mode:>3}: {wall:7.0f} us/cycle wall, {client:6.0f} us client CPU, "
            f"{server:6.0f} us server CPU  ({len(mine)} rounds)"
        )
    for mode in ("index", "on"):
        ratios = [m / off for m, off in zip(medians[mode], medians["off"], strict=True)]
        total = sum(medians[mode][1:]) / sum(medians["off"][1:])
        print(
            f"{mode}/off: wall {ratios[0] - 1:+.1%}, client CPU {ratios[1] - 1:+.1%}, "
            f"server CPU {ratios[2] - 1:+.1%}; client + server CPU {total - 1:+.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="rounds in all (a third each)")
    parser.add_argument("--cycles", type=int, default=400, help="claim+finish cycles a round")
    args = parser.parse_args()
    name = f"flowforge_feed_cost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        with FlowForge(url, migrate=True) as app:
            one_round(app, url, "on", 100)  # warm up: pool, prepared statements, caches
            order = list(MODES)
            rounds = [
                one_round(app, url, order[i % len(order)], args.cycles) for i in range(args.rounds)
            ]
        report(rounds)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
