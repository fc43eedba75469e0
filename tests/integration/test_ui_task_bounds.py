"""A task's page stays small whatever the task waits on (docs/ui.md, "A task"): a task
after hundreds of others lists 20 of its dependencies, and each line of its ``why`` is
cut to ``pages.WHY_LINE`` characters, saying how much more ``flowforge why`` prints."""

from __future__ import annotations

from starlette.testclient import TestClient

from flowforge.app.service import FlowForge
from flowforge.ui import create_app, pages
from tests.helpers import task_id

UPSTREAM = [f"an_upstream_task_with_a_long_name_{i}" for i in range(300)]
FAN_IN = {
    "name": "fan_in",
    "tasks": [
        *({"key": key, "type": "work"} for key in UPSTREAM),
        {"key": "end", "type": "work", "depends_on": UPSTREAM},
    ],
}


def test_a_task_waiting_on_hundreds_has_a_bounded_page(app: FlowForge) -> None:
    run_id = app.start_workflow_run(FAN_IN)
    app.schedule_once()
    with TestClient(create_app(app, token=None)) as client:
        page = client.get(f"/tasks/{task_id(app, run_id, 'end')}")
    assert page.status_code == 200
    assert "and 280 more" in page.text and UPSTREAM[20] not in page.text.split("<h2>Why")[0]
    assert "characters more: `flowforge why` prints it all" in page.text
    assert len(page.content) < 3 * pages.WHY_LINE + 10_000  # not its 300 names twice over
