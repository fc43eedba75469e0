"""A worker SIGKILLed during the finish of a mapped task's upstream, on both backends:
the upstream's success and its elements are one transaction, so after the kill the run
holds either every element (the upstream succeeded, each element with its row, its
creation event and its dispatch) or none (the upstream still running, on the killed
worker's lease), never part of them. The kill lands at several moments of a finish
that creates thousands of elements."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowforge.app.service import FlowForge
from tests.helpers import task_id

ELEMENTS = 3000
#: After the child said it claimed: from at once to around its finish; None: once it
#: said it finished.
DELAYS_S = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, None)
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, uuid
from flowforge import FlowForge
app = FlowForge(sys.argv[1])
task = uuid.UUID(sys.argv[2])
claim = app.claim_task_run(task, "doomed", 300)
assert claim is not None
print("claimed", flush=True)
app.finish_task_run(task, claim.fencing_token, "succeed", list(range(int(sys.argv[3]))))
print("finished", flush=True)
"""

DEFINITION = {
    "name": "killed",
    "tasks": [
        {"key": "list_files", "type": "list_files"},
        {"key": "process", "type": "process", "map_over": "list_files"},
    ],
}


def url_of(app: FlowForge, request: pytest.FixtureRequest) -> str:
    if app.database.dialect == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(request.getfixturevalue("sqlite_url"))


def kill_during_the_finish(url: str, task: str, delay: float | None) -> bool:
    """Run the child's claim and finish, SIGKILL it ``delay`` after its claim; whether
    it said it finished first."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, url, task, str(ELEMENTS)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed"
        if delay is None:
            assert child.stdout.readline().strip() == "finished"
            said = True
        else:
            time.sleep(delay)
            said = False
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        return said or child.stdout.read().strip() == "finished"


def test_a_killed_finish_leaves_every_element_or_none(
    app: FlowForge, request: pytest.FixtureRequest
) -> None:
    url = url_of(app, request)
    outcomes = []
    for delay in DELAYS_S:
        run_id = app.start_workflow_run(DEFINITION)
        upstream = task_id(app, run_id, "list_files")
        said_finished = kill_during_the_finish(url, str(upstream), delay)

        tasks = app.task_runs(run_id)
        elements = [t for t in tasks if t.map_index is not None]
        listed = next(t for t in tasks if t.task_key == "list_files")
        if elements:
            assert listed.state == "succeeded"
            assert sorted(e.map_index or 0 for e in elements) == list(range(ELEMENTS))
            assert all(e.state == "ready" for e in elements)
            assert app.run_history_count(run_id) >= 1 + 2 + 2 + ELEMENTS  # their events
            for element in elements[:: ELEMENTS // 10]:
                assert len(app.dispatches_of(element.id)) == 1
            outcomes.append("whole")
        else:
            assert not said_finished
            assert (listed.state, listed.lease_owner) == ("running", "doomed")
            outcomes.append("none")
    # Not vacuous: at once the kill beats the finish, and after long enough it does not.
    assert outcomes[0] == "none", outcomes
    assert outcomes[-1] == "whole", outcomes

    before = {t.id: t for run in app.recent_runs(limit=100) for t in app.task_runs(run.id)}
    app.rebuild_projections()  # `flowforge db rebuild`: the log holds what the rows do
    after = {t.id: t for run in app.recent_runs(limit=100) for t in app.task_runs(run.id)}
    assert after == before
