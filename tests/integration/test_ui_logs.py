"""Each attempt's captured log on its task's page, beside its error, a page of lines at
a time (``ui/logs.py``), on both backends: read through the application service as
``flowforge logs`` reads it, escaped as everything a handler wrote is."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from flowforge.app.service import FlowForge
from flowforge.ui import create_app, logs
from tests.helpers import one_task, task_id

FLAKY = {**one_task("t"), "retry": {"max_attempts": 2, "backoff_seconds": 0, "jitter": 0.0}}
XSS = "<script>alert(1)</script>"
LONG = logs.LINES * 2 + 50


@pytest.fixture
def client(app: FlowForge) -> Iterator[TestClient]:
    with TestClient(create_app(app, token=None)) as client:
        yield client


def failed_then_retried(app: FlowForge) -> tuple[str, int]:
    """A task whose first attempt failed after printing ``LONG`` lines and whose second
    is running: its page's URL and the first claim's fencing token."""
    run_id = app.start_workflow_run(FLAKY)
    app.schedule_once()
    task = task_id(app, run_id, "t")
    claim = app.claim_task_run(task, "w-1", 30)
    assert claim is not None
    output = "\n".join([XSS, *(f"line {i}" for i in range(2, LONG + 1))])
    error = {"type": "Boom", "message": "it broke"}
    assert app.finish_task_run(task, claim.fencing_token, "fail", error=error)
    app.record_attempt_log(
        task, claim.fencing_token, attempt=1, worker_id="w-1", output=output, dropped_chars=7
    )
    app.schedule_once()
    assert app.claim_task_run(task, "w-2", 30) is not None
    return f"/tasks/{task}", claim.fencing_token


def attempt(page: str, n: int) -> str:
    found = re.search(rf'<section class="attempt" id="attempt-{n}">(.*?)</section>', page, re.S)
    assert found, f"no attempt {n}"
    return found.group(1)


def test_an_attempt_s_log_is_shown_beside_its_error_a_page_at_a_time(
    app: FlowForge, client: TestClient
) -> None:
    url, token = failed_then_retried(app)
    first = attempt(client.get(url).text, 1)
    assert first.index("Boom: it broke") < first.index('<pre class="log">')
    assert f"lines 1 to {logs.LINES} of {LONG}, 7 characters dropped" in first
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in first and XSS not in first
    assert f"line {logs.LINES}</pre>" in first and not re.search(
        rf"line {logs.LINES + 1}\b", first
    )
    assert f'href="?log={token}&amp;log_page=2#attempt-1"' in first
    last = attempt(client.get(url, params={"log": str(token), "log_page": "3"}).text, 1)
    assert f"lines {2 * logs.LINES + 1} to {LONG} of {LONG}" in last
    assert f"line {LONG}</pre>" in last and not re.search(rf"line {2 * logs.LINES}\b", last)
    assert "page 3 of 3" in last and 'rel="next"' not in last


def test_an_attempt_still_running_has_no_log_yet(app: FlowForge, client: TestClient) -> None:
    url, _ = failed_then_retried(app)
    second = attempt(client.get(url).text, 2)
    assert '<pre class="log">' not in second and "no log" not in second
