"""examples/mapped.toml runs to the end on both backends, through the embedded
processes (scheduler, publisher, workers): one task per listed file, the retried
element retried on its own, and the reduce step's list in index order."""

from __future__ import annotations

from pathlib import Path

import examples.mapped_tasks  # registers the example's handlers with @task
from flowforge.app.service import FlowForge
from flowforge.bootstrap import ProcessGroup, Transport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mapped.toml"


def test_the_mapped_example_runs_one_task_per_file_and_summarizes_them_in_order(
    app: FlowForge,
) -> None:
    assert callable(examples.mapped_tasks.list_files)  # imported for its registrations
    run_id = app.start_workflow_run(str(EXAMPLE), {"count": 4})
    with ProcessGroup(app, Transport.in_memory(), workers=2, runs=[run_id]) as group:
        run = group.wait_for(run_id, timeout=60)

    assert run.state == "succeeded"
    tasks = {t.task_key: t for t in app.task_runs(run_id)}
    assert sorted(tasks) == [
        "list_files",
        "process[0]",
        "process[1]",
        "process[2]",
        "process[3]",
        "summarize",
    ]
    assert tasks["process[1]"].attempt == 2  # failed once, retried on its own
    assert tasks["process[0]"].attempt == 1
    files = [f"file-{i}.csv" for i in range(4)]
    assert tasks["summarize"].result == {"files": files, "rows": 4 * 100}
