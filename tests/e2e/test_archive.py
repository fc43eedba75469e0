"""`flowforge db archive` as a process: killed in the middle, every run is either fully
live or fully archived, and the same command finishes the job; run beside a working
deployment, it archives the ended runs only, and the live ones run to the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from uuid import UUID

from flowforge.app.service import FlowForge
from flowforge.cli.archive import PAUSE_VARIABLE
from tests.e2e.cluster import Cluster, chains
from tests.e2e.test_cli import Cli
from tests.helpers import wait_until

TWO = {"name": "two", "tasks": [{"key": "a", "type": "work"}, {"key": "b", "type": "work"}]}
#: More runs than three delete batches hold (app/archive.py, BATCH_RUNS = 200).
RUNS = 450
#: A cancelled run of TWO: its creation and its tasks', the run's cancel and its tasks'.
EVENTS_PER_RUN = 6
KILL_DEADLINE_S = 120


def _ended_runs(app: FlowForge, count: int) -> list[UUID]:
    runs = app.start_workflow_runs(TWO, [None] * count)
    for run in runs:
        assert app.cancel_workflow_run(run)
    return runs


def _where(app: FlowForge, run: UUID) -> str:
    """``live`` (its row, its tasks and every event) or ``archived`` (none of them, and
    its archived_runs row); anything in between fails the test."""
    with app.store.archive_read() as reads:
        records = reads.export([run])
    with app.store.read() as reads:
        archived = reads.archived_run(run)
    if records:
        (record,) = records
        assert archived is None, f"run {run} is live and archived"
        assert (len(record.tasks), len(record.events)) == (2, EVENTS_PER_RUN), run
        return "live"
    assert archived is not None, f"run {run} is neither live nor archived"
    with app.store.archive_read() as reads:
        assert reads.count_events([run]) == 0, f"run {run} is archived but has events"
    return "archived"


def test_an_archiver_killed_between_batches_leaves_each_run_live_or_archived(
    embedded_cli: Cli,
) -> None:
    url = embedded_cli.env["FLOWFORGE_DATABASE_URL"]
    with FlowForge(url) as app:
        runs = _ended_runs(app, RUNS)
    file, marker = embedded_cli.cwd / "old.ffarchive", embedded_cli.cwd / "paused"
    env = {**embedded_cli.env, PAUSE_VARIABLE: f"1:{marker}"}
    command = ["db", "archive", "--finished-before", "0s", "--to", str(file)]
    archiver = subprocess.Popen(
        [sys.executable, "-m", "flowforge", *command],
        cwd=embedded_cli.cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(marker.exists, KILL_DEADLINE_S, "the archiver's first batch")
        os.kill(archiver.pid, signal.SIGKILL)
    finally:
        archiver.kill()
        archiver.wait()

    with FlowForge(url) as app:
        where = [_where(app, run) for run in runs]
    assert 0 < where.count("archived") < RUNS  # killed in the middle, not before or after

    finished = embedded_cli("db", "archive", "--finished-before", "0s", "--to", str(file))
    assert finished.returncode == 0, finished.stderr
    assert f"archived {where.count('live')} runs" in finished.stdout
    with FlowForge(url) as app:
        assert {_where(app, run) for run in runs} == {"archived"}
    restored = embedded_cli("db", "restore", str(file))
    assert restored.returncode == 0, restored.stderr
    assert f"restored {RUNS} runs ({RUNS * EVENTS_PER_RUN} events)" in restored.stdout
    rebuilt = embedded_cli("db", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr


def test_archiving_beside_a_working_deployment_takes_only_ended_runs_and_loses_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_all(workers=2)
    old = [cluster.submit(chains(1, 2)) for _ in range(5)]
    for run in old:
        assert cluster.wait_for_run(run).state == "succeeded"
    live = cluster.submit(chains(3, 20, lease_seconds=10))
    wait_until(
        lambda: any(t.state == "succeeded" for t in cluster.app.task_runs(live)), 60, "work"
    )
    file = tmp_path / "old.ffarchive"
    args = ["db", "archive", "--finished-before", "0s", "--to", str(file)]

    archived = cluster.start("archiver", *args)

    assert archived.wait(timeout=120) == 0, cluster.log_tails()
    for run in old:
        assert _where(cluster.app, run) == "archived"
    with cluster.app.store.read() as reads:
        assert reads.archived_run(live) is None  # live: never a candidate
    assert cluster.wait_for_run(live, timeout=120).state == "succeeded"
    tasks = cluster.app.task_runs(live)
    assert {t.state for t in tasks} == {"succeeded"}
    ran = {e["task_key"] for e in cluster.effects() if e.get("event") == "ran"}
    assert {t.task_key for t in tasks} <= ran
    restore = cluster.start("restorer", "db", "restore", str(file))
    assert restore.wait(timeout=120) == 0, cluster.log_tails()
    for run in old:
        assert cluster.app.get_workflow_run(run).state == "succeeded"
