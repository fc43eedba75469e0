"""The feed under a concurrent workload, on both backends: eight writers (each creating,
claiming, finishing and advancing runs, some failing) and two followers, each folding the
feed into its own projection. Each follower ends with every event of the log exactly
once, and its projection equals the rows the rebuild makes from the log.

Sized for the 2-core machine: 8 writers x 3 runs of 3 tasks (about 400 events)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from uuid import UUID

from flowforge.app.feed import FeedEvent
from flowforge.app.service import FlowForge
from tests.helpers import RACE_TIMEOUT_S, task_id, wait_until

WRITERS = 8
RUNS_PER_WRITER = 3
DAG = {
    "name": "fan",
    "retry": {"max_attempts": 2, "backoff_seconds": 0.0, "backoff_cap_seconds": 0.0},
    "tasks": [
        {"key": "a", "type": "work"},
        {"key": "b", "type": "work", "depends_on": ["a"]},
        {"key": "c", "type": "work", "depends_on": ["a"]},
    ],
}
#: Far above the time it takes; the server's horizon can hold a feed back for a while
#: (tests/integration/test_feed.py, FEED_DEADLINE_S).
FEED_DEADLINE_S = 300.0


@dataclass
class Projection:
    """A follower's own read model: each run's state, each task's state and attempt."""

    runs: dict[UUID, str] = field(default_factory=dict)
    tasks: dict[UUID, tuple[str, int | None]] = field(default_factory=dict)
    seen: list[tuple[UUID, int]] = field(default_factory=list)

    def apply(self, event: FeedEvent) -> None:
        self.seen.append((event.aggregate_id, event.version))
        if event.aggregate == "WorkflowRun":
            self.runs[event.aggregate_id] = event.target
        elif event.aggregate == "TaskRun":
            self.tasks[event.aggregate_id] = (event.target, event.attempt)


def write_runs(app: FlowForge, seed: int) -> None:
    """Runs driven as workers and a scheduler would, failing some attempts at random."""
    chance = random.Random(seed)
    for _ in range(RUNS_PER_WRITER):
        run_id = app.start_workflow_run(DAG)
        for key in ("a", "b", "c"):
            for _attempt in range(2):
                claim = app.claim_task_run(task_id(app, run_id, key), f"w{seed}", 30.0)
                if claim is None:
                    app.schedule_once()
                    continue
                outcome = "fail" if chance.random() < 0.3 else "succeed"
                error = {"type": "Boom", "message": "x"} if outcome == "fail" else None
                app.finish_task_run(claim.task_run_id, claim.fencing_token, outcome, error=error)
                app.schedule_once()
                if outcome == "succeed":
                    break
        app.schedule_once()


def test_eight_writers_and_two_followers_each_follower_projects_what_the_rebuild_does(
    app: FlowForge,
) -> None:
    start = app.feed_head()
    stop = threading.Event()
    projections = [Projection(), Projection()]

    def follow(projection: Projection) -> None:
        for event in app.follow(after=start, stop=stop, poll_s=0.05, batch=50):
            projection.apply(event)

    followers = [threading.Thread(target=follow, args=(p,)) for p in projections]
    writers = [threading.Thread(target=write_runs, args=(app, seed)) for seed in range(WRITERS)]
    for thread in followers + writers:
        thread.start()
    try:
        for writer in writers:
            writer.join(FEED_DEADLINE_S)
        assert not any(w.is_alive() for w in writers), "a writer never finished"
        log = app.events.recorder.select_notifications(start=None, limit=1_000_000)
        logged = sorted((e.originator_id, e.originator_version) for e in log)
        for projection in projections:
            wait_until(
                lambda p=projection: len(p.seen) >= len(logged),  # type: ignore[misc]
                FEED_DEADLINE_S,
                "a follower never reached the end of the log",
            )
    finally:
        stop.set()
        for follower in followers:
            follower.join(RACE_TIMEOUT_S)
    assert not any(f.is_alive() for f in followers), "a follower did not stop"

    report = app.rebuild_projections()
    runs = app.recent_runs(1000)
    rebuilt_runs = {run.id: run.state for run in runs}
    rebuilt_tasks = {t.id: (t.state, t.attempt) for run in runs for t in app.task_runs(run.id)}
    assert report.events == len(logged)
    for projection in projections:
        assert sorted(projection.seen) == logged  # every event, none twice
        assert projection.runs == rebuilt_runs
        assert projection.tasks == rebuilt_tasks
    assert projections[0].seen == projections[1].seen  # one order for every follower
    last: dict[UUID, int] = {}
    for aggregate_id, version in projections[0].seen:  # each aggregate's in version order
        assert version == last.get(aggregate_id, 0) + 1, (aggregate_id, version)
        last[aggregate_id] = version
