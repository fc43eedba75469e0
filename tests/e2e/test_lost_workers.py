"""A handler that kills its own worker, for real (docs/execution-model.md, "A worker lost
too often"): the task is reclaimed and run again until it has lost its worker
``max_worker_losses`` times, then failed with ``WorkerLost``; the retry policy applies,
each later loss failing its attempt at once. The crash loop ends, and ``why`` says why.

On PostgreSQL and RabbitMQ with separate processes, each dead worker restarted as a
supervisor would; and on the embedded default, a ``flowforge run`` killed by its handler
and started again (``run --resume``) until the run ends.
"""

from __future__ import annotations

import json
import signal
import time

from flowforge.aggregates.lost_workers import DEFAULT_MAX_WORKER_LOSSES, WORKER_LOST
from flowforge.app.results import WorkflowRunView
from flowforge.app.why import why
from tests.e2e.cluster import Cluster
from tests.e2e.test_cli import Cli

#: Short, so that each lost worker costs about a second.
LEASE_S = 1
#: Bounds the whole crash loop: a restart is a Python start-up on a loaded machine.
LOOP_S = 120.0


def supervise(cluster: Cluster, run_id: object, workers: int = 2) -> WorkflowRunView:
    """Keep ``workers`` workers up, starting a new one for each that died (as systemd or
    Kubernetes would), until the run ends; the run as it ended."""
    restarts = 0
    deadline = time.monotonic() + LOOP_S
    while time.monotonic() < deadline:
        run = cluster.app.get_workflow_run(run_id)  # type: ignore[arg-type]
        if run.state in ("succeeded", "failed", "cancelled"):
            return run
        for name, process in list(cluster.processes.items()):
            if name.startswith("worker") and process.poll() is not None:
                del cluster.processes[name]
                restarts += 1
                cluster.start_worker(f"worker-r{restarts}")
        time.sleep(0.1)
    raise AssertionError(f"the run never ended\n{cluster.log_tails()}")


def test_a_handler_that_kills_its_worker_fails_after_its_bound_with_workers_restarted(
    cluster: Cluster,
) -> None:
    cluster.start_all(workers=2)
    run_id = cluster.submit(
        {
            "name": "suicidal",
            "lease_seconds": LEASE_S,
            "retry": {"max_attempts": 2, "backoff_seconds": 0.1},
            "tasks": [{"key": "victim", "type": "suicide"}],
        }
    )
    assert supervise(cluster, run_id).state == "failed"

    (task,) = cluster.app.task_runs(run_id)
    bound = DEFAULT_MAX_WORKER_LOSSES
    # The bound's losses for attempt 1, then one for attempt 2 (the count is kept).
    assert (task.attempt, task.worker_losses) == (2, bound + 1)
    assert task.error is not None and task.error["type"] == WORKER_LOST
    edges = [e.transition for e in cluster.app.history(task.id) if e.transition != "renew_lease"]
    assert edges == [
        "create",
        *["claim", "reap_lease"] * (bound - 1),
        *["claim", "fail", "schedule_retry", "retry_ready"],
        *["claim", "fail"],
    ]
    started = [e for e in cluster.effects() if e["event"] == "started"]
    assert len(started) == bound + 1
    assert len({e["pid"] for e in started}) == bound + 1  # each killed its own worker
    assert f"lost its worker {bound + 1} times" in why(cluster.app, task.id).headline
    logs = "".join(p.read_text() for p in cluster.logs.glob("worker-r*.log"))
    assert "task starting that lost its worker before" in logs


#: The embedded runner's handler module: the task kills the process that runs it.
SUICIDE_MODULE = """
import os
import signal

from flowforge import task

WORKFLOW = {
    "name": "suicidal",
    "lease_seconds": 1,
    "retry": {"max_attempts": 1},
    "max_worker_losses": 2,
    "tasks": [{"key": "victim", "type": "suicide"}],
}


@task("suicide")
def suicide(ctx):
    with open("started.log", "a") as log:
        log.write(f"{os.getpid()}\\n")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_embedded_run_killed_by_its_handler_and_started_again_fails_after_its_bound(
    embedded_cli: Cli,
) -> None:
    cli = embedded_cli
    (cli.cwd / "suicide_tasks.py").write_text(SUICIDE_MODULE)
    first = cli("run", "suicide_tasks:WORKFLOW", timeout=LOOP_S)
    assert first.returncode == -signal.SIGKILL, first.stderr
    (run,) = cli.json("runs")
    codes = [first.returncode]
    while len(codes) < 6:
        again = cli("run", "--resume", run["run_id"], "--tasks", "suicide_tasks", timeout=LOOP_S)
        codes.append(again.returncode)
        if again.returncode != -signal.SIGKILL:
            break
    # Killed at the claims of losses 1 and 2; the next start reaps the second lease at
    # the bound (2), fails the task and ends the run.
    assert codes == [-signal.SIGKILL, -signal.SIGKILL, 1], again.stdout + again.stderr
    assert len((cli.cwd / "started.log").read_text().split()) == 2
    (ended,) = cli.json("runs")
    assert ended["state"] == "failed"
    explained = cli("why", f"{run['run_id']}/victim")
    assert "lost its worker 2 times" in explained.stdout, explained.stdout
    status = cli("status", run["run_id"])
    assert "WorkerLost: lost its worker 2 times" in status.stdout, status.stdout
    history = json.dumps(cli.json("history", run["run_id"]))
    assert "lost its worker 2 times" in history
