"""The redispatch net with real processes (docs/delivery.md, "Redispatch"): a backlog
that waits with no worker and then takes the workers several redispatch periods to
drain gets no duplicate storm, and a purged queue's dispatches are replaced. The
period is shortened with ``flowforge scheduler --redispatch-after``."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from flowforge.app import why as explain_task
from flowforge.processes import rabbitmq
from tests.e2e.cluster import Cluster, admin, ran
from tests.helpers import wait_until

#: The shortened period: the backlog below waits and drains over several of them.
PERIOD_S = 2.0
BACKLOG = 300
#: The issue's bound: a backlog adds at most 2 % duplicate dispatches.
DUPLICATES_ALLOWED = 0.02


def flat(n: int, task_type: str) -> dict[str, Any]:
    return {
        "name": f"flat_{n}",
        "tasks": [{"key": f"t{i:04}", "type": task_type} for i in range(n)],
    }


def outbox_rows(cluster: Cluster) -> tuple[int, int]:
    """(every outbox row, the redispatches among them)."""
    with admin(cluster.database_url) as conn:
        row = conn.execute("SELECT count(*), count(reason) FROM dispatch_outbox").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def start_net(cluster: Cluster) -> None:
    cluster.start(
        "scheduler", "scheduler", "--interval", "0.2", "--redispatch-after", str(PERIOD_S)
    )
    cluster.start("publisher", "publisher", "--interval", "0.1")


def published(cluster: Cluster, n: int) -> bool:
    with admin(cluster.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dispatch_outbox WHERE published_at IS NOT NULL"
        ).fetchone()
    return row is not None and int(row[0]) >= n


def test_a_backlog_that_waits_and_drains_over_several_periods_adds_no_duplicate_storm(
    cluster: Cluster,
) -> None:
    start_net(cluster)
    run_id = cluster.submit(flat(BACKLOG, "paced"))
    wait_until(lambda: published(cluster, BACKLOG), 60, "the backlog was not published")
    # No worker for the type yet: every task waits with its one dispatch, period after
    # period (the old net added one per task per period).
    time.sleep(3 * PERIOD_S)
    assert outbox_rows(cluster) == (BACKLOG, 0)
    cluster.start_worker("worker-1")
    cluster.start_worker("worker-2")
    started = time.monotonic()
    assert cluster.wait_for_run(run_id, timeout=240).run_state == "succeeded"
    drained_s = time.monotonic() - started
    rows, redispatched = outbox_rows(cluster)
    assert rows <= BACKLOG * (1 + DUPLICATES_ALLOWED), (rows, redispatched, drained_s)
    runs = Counter(effect["task_key"] for effect in ran(cluster))
    assert len(runs) == BACKLOG and set(runs.values()) == {1}  # each exactly once
    assert drained_s > PERIOD_S  # the drain really spanned periods (else the test is void)


def test_a_purged_queue_s_dispatches_are_replaced_with_the_reason_and_run_once(
    cluster: Cluster,
) -> None:
    n = 20
    start_net(cluster)
    run_id = cluster.submit(flat(n, "quick"))
    wait_until(lambda: published(cluster, n), 60, "the dispatches were not published")
    connection = rabbitmq.connect(cluster.broker, name="flowforge-test-admin")
    try:
        connection.channel().queue_purge(cluster.broker.queue_for("quick"))
    finally:
        connection.close()
    # Replaced within the period plus its confirmation (here the period again), and
    # published: each task's second dispatch, with its reason.
    wait_until(
        lambda: outbox_rows(cluster) == (2 * n, n) and published(cluster, 2 * n),
        10 * PERIOD_S,
        "the purged dispatches were not replaced",
    )
    task = cluster.app.task_runs(run_id)[0]
    answer = explain_task.why(cluster.app, task.id)
    assert "redispatched because its queue held fewer messages" in answer.headline
    cluster.start_worker("worker-1")
    assert cluster.wait_for_run(run_id, timeout=120).run_state == "succeeded"
    runs = Counter(effect["task_key"] for effect in ran(cluster))
    assert len(runs) == n and set(runs.values()) == {1}
    assert outbox_rows(cluster) == (2 * n, n)  # nothing more once the queue held them
