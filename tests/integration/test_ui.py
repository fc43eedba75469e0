"""The web UI over HTTP (Starlette's TestClient) on both backends: every page, the
filters, the time slider's replay, the cancel action and its CSRF check, the token rules,
escaping, and a large run's grouped page (docs/ui.md, "How it is tested")."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from starlette.testclient import TestClient

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app.service import FlowForge
from flowforge.ui import create_app, pages
from tests.helpers import LEASE_S, task_id, work

CHAIN = {
    "name": "chain",
    "tasks": [
        {"key": "extract", "type": "work"},
        {"key": "load", "type": "work", "depends_on": ["extract"]},
    ],
}
XSS = "<script>alert(1)</script>"


@pytest.fixture
def client(app: FlowForge) -> Iterator[TestClient]:
    with TestClient(create_app(app, token=None)) as client:
        yield client


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


def finished_chain(app: FlowForge) -> UUID:
    run_id = app.start_workflow_run(CHAIN, {"rows": 3})
    work(app, run_id, "extract")
    work(app, run_id, "load")
    assert app.get_workflow_run(run_id).state == "succeeded"
    return run_id


def test_the_runs_page_lists_runs_newest_first_with_counts(
    app: FlowForge, client: TestClient
) -> None:
    done = finished_chain(app)
    running = app.start_workflow_run(CHAIN)
    page = client.get("/")
    assert page.status_code == 200
    assert page.text.index(short_id(running)) < page.text.index(short_id(done))
    counts = re.search(r'id="counts">(.*?)</p>', page.text, re.S)
    assert counts
    assert "pending 1" in counts.group(1)
    assert "succeeded 1" in counts.group(1)


def test_the_runs_page_filters_by_state_and_workflow(app: FlowForge, client: TestClient) -> None:
    done = finished_chain(app)
    running = app.start_workflow_run(CHAIN)
    other = app.start_workflow_run({**CHAIN, "name": "other"})
    by_state = client.get("/", params={"state": "succeeded"}).text
    assert short_id(done) in by_state
    assert short_id(running) not in by_state
    by_name = client.get("/", params={"workflow": "other"}).text
    assert short_id(other) in by_name
    assert short_id(done) not in by_name
    assert "no runs match" in client.get("/", params={"state": "cancelled"}).text


def test_the_runs_page_is_paginated(app: FlowForge, client: TestClient) -> None:
    run_ids = app.start_workflow_runs(CHAIN, [None] * 51)
    first, second = client.get("/").text, client.get("/", params={"page": 2}).text
    assert "page 1 of 2" in first
    assert 'rel="next"' in first
    assert first.count('class="run-row"') == 50
    assert second.count('class="run-row"') == 1
    shown = [re.findall(r'<a href="/runs/([0-9a-f-]+)"', page) for page in (first, second)]
    assert sorted(UUID(i) for i in shown[0] + shown[1]) == sorted(run_ids)  # each once


def test_a_short_id_search_opens_the_run(app: FlowForge, client: TestClient) -> None:
    run_id = finished_chain(app)
    page = client.get("/", params={"q": short_id(run_id)})
    assert page.status_code == 200
    assert str(page.url).endswith(f"/runs/{run_id}")
    assert str(run_id) in page.text
    full = client.get("/", params={"q": str(run_id)}, follow_redirects=False)
    assert full.status_code == 303
    missing = client.get("/", params={"q": "ffffeeee"})
    assert missing.status_code == 404
    assert "no workflow run has an id" in missing.text
    assert client.get("/", params={"q": "zz"}).status_code == 404
    assert client.get("/runs/ffffeeee").status_code == 404


def test_a_runs_page_shows_header_dag_colours_and_timeline(
    app: FlowForge, client: TestClient
) -> None:
    run_id = app.start_workflow_run(CHAIN, {"rows": 3})
    work(app, run_id, "extract")
    page = client.get(f"/runs/{short_id(run_id)}")
    assert page.status_code == 200
    assert "&#34;rows&#34;: 3" in page.text  # the inputs' JSON, escaped
    dag = _svg(page.text, "dag")
    assert re.search(r'class="task state-succeeded" data-key="extract"', dag)
    assert re.search(r'class="task state-ready" data-key="load"', dag)
    edge = r'<path class="edge" d="M[^"]+" marker-end="url\(#arrow\)" data-from="extract"'
    assert re.search(edge + ' data-to="load"', dag)  # the edge extract -> load, an arrow
    assert '<marker id="arrow"' in dag
    timeline = _svg(page.text, "timeline")
    assert timeline.count('class="bar state-succeeded"') == 1
    assert 'type="range"' in page.text
    tasks = re.search(r'id="tasks">(.*?)</table>', page.text, re.S)
    assert tasks
    assert tasks.group(1).count("<tr") == 3  # the header, extract and load


def test_the_slider_shows_a_task_as_it_was(app: FlowForge, client: TestClient) -> None:
    run_id = app.start_workflow_run(CHAIN)
    work(app, run_id, "extract")
    load = app.claim_task_run(task_id(app, run_id, "load"), "test-worker", LEASE_S)
    assert load is not None
    # The claim and the finish at distinct moments of the database's clock (SQLite's
    # has millisecond steps): the slider stops at each transition's time.
    time.sleep(0.01)
    assert app.finish_task_run(load.task_run_id, load.fencing_token, "succeed")
    history = app.run_history(run_id)
    claimed = next(e.at for e in history if e.task_key == "load" and e.target == "running")
    then = client.get(f"/runs/{run_id}", params={"at": claimed.isoformat()}).text
    assert re.search(r'class="task state-running" data-key="load"', _svg(then, "dag"))
    assert "replayed from the audit log" in then
    now = client.get(f"/runs/{run_id}").text
    assert re.search(r'class="task state-succeeded" data-key="load"', _svg(now, "dag"))
    before = client.get(
        f"/runs/{run_id}", params={"at": (history[0].at - timedelta(1)).isoformat()}
    )
    assert 'class="task state-none"' in before.text
    assert client.get(f"/runs/{run_id}", params={"at": "yesterday"}).status_code == 400


def test_the_task_page_shows_every_attempt_and_why(app: FlowForge, client: TestClient) -> None:
    run_id = app.start_workflow_run(CHAIN)
    extract = task_id(app, run_id, "extract")
    first = app.claim_task_run(extract, "worker-a", LEASE_S)
    assert first is not None
    failed = {"type": "Boom", "message": "first try", "traceback": "Traceback: line 1"}
    assert app.finish_task_run(extract, first.fencing_token, "fail", error=failed)
    assert app.schedule_retry(extract)
    assert app.retry_ready(extract)
    second = app.claim_task_run(extract, "worker-b", LEASE_S)
    assert second is not None
    assert app.finish_task_run(extract, second.fencing_token, "succeed", result={"n": 41})
    page = client.get(f"/tasks/{extract}")
    assert page.status_code == 200
    assert 'id="attempt-2"' in page.text
    assert "worker-a" in page.text
    assert "worker-b" in page.text
    assert "Boom: first try" in page.text
    assert "Traceback: line 1" in page.text
    assert "&#34;n&#34;: 41" in page.text  # the result's JSON, escaped
    assert 'id="why-now"' in page.text
    assert "succeeded" in page.text
    claimed_at = app.history(extract)[1].at
    then = client.get(f"/tasks/{extract}", params={"at": claimed_at.isoformat()})
    why_then = re.search(r'id="why-then">(.*?)</div>', then.text, re.S)
    assert why_then
    assert "worker-a" in why_then.group(1)
    assert client.get(f"/tasks/{UUID(int=1)}").status_code == 404
    assert client.get("/tasks/nope").status_code == 404


def test_cancel_needs_the_csrf_token(app: FlowForge, client: TestClient) -> None:
    run_id = app.start_workflow_run(CHAIN)
    page = client.get(f"/runs/{run_id}").text
    refused = client.post(f"/runs/{run_id}/cancel", data={})
    assert refused.status_code == 403
    wrong = client.post(f"/runs/{run_id}/cancel", data={"csrf_token": "guess"})
    assert wrong.status_code == 403
    assert app.get_workflow_run(run_id).state == "pending"
    done = client.post(f"/runs/{run_id}/cancel", data={"csrf_token": csrf_of(page)})
    assert done.status_code == 200
    assert app.get_workflow_run(run_id).state == "cancelled"
    assert 'id="run-state">cancelled' in done.text
    assert 'id="notice">cancelled this run' in done.text


def test_cancelling_a_finished_run_is_refused_with_the_reason(
    app: FlowForge, client: TestClient
) -> None:
    run_id = finished_chain(app)
    token = csrf_of(client.get("/runs/" + str(app.start_workflow_run(CHAIN))).text)
    refused = client.post(f"/runs/{run_id}/cancel", data={"csrf_token": token})
    assert refused.status_code == 409
    assert "already succeeded; a finished run never changes" in refused.text
    assert app.get_workflow_run(run_id).state == "succeeded"
    assert "/cancel" not in client.get(f"/runs/{run_id}").text  # no button to press


def test_the_slider_script_is_served_from_the_package(client: TestClient) -> None:
    script = client.get("/static/ui.js")
    assert script.status_code == 200
    assert "?at=" in script.text
    assert client.get("/static/ui.css").status_code == 200


def test_reading_pages_writes_nothing(app: FlowForge, client: TestClient) -> None:
    run_id = finished_chain(app)
    before = len(app.run_history(run_id)), app.get_workflow_run(run_id).version
    extract = task_id(app, run_id, "extract")
    for path in ("/", f"/runs/{run_id}", f"/tasks/{extract}"):
        assert client.get(path).status_code == 200
    assert (len(app.run_history(run_id)), app.get_workflow_run(run_id).version) == before


def test_with_a_token_every_request_needs_it(app: FlowForge) -> None:
    run_id = finished_chain(app)
    with TestClient(create_app(app, token="s3cret")) as client:
        assert client.get("/").status_code == 401
        assert client.get(f"/runs/{run_id}").status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/", params={"token": "wrong"}).status_code == 401
        opened = client.get(f"/runs/{run_id}", params={"token": "s3cret"})
        assert opened.status_code == 200  # redirected without it, the cookie set
        assert "token" not in str(opened.url)
        assert client.get("/").status_code == 200


def test_what_users_and_handlers_wrote_is_escaped(app: FlowForge, client: TestClient) -> None:
    run_id = app.start_workflow_run(CHAIN, {"note": XSS})
    extract = task_id(app, run_id, "extract")
    claim = app.claim_task_run(extract, XSS, LEASE_S)
    assert claim is not None
    error = {"type": "Boom", "message": XSS, "traceback": XSS}  # on both pages
    assert app.finish_task_run(extract, claim.fencing_token, "fail", error=error)
    for path in (f"/runs/{run_id}", f"/tasks/{extract}"):
        page = client.get(path)
        assert page.status_code == 200
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "<script>alert" not in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_a_run_of_1000_tasks_is_drawn_grouped_paged_and_small(
    app: FlowForge, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks: list[dict[str, Any]] = [{"key": "root", "type": "work"}]
    tasks += [{"key": f"t{i}", "type": "work", "depends_on": ["root"]} for i in range(998)]
    tasks.append({"key": "end", "type": "work", "depends_on": [f"t{i}" for i in range(998)]})
    run_id = app.start_workflow_run({"name": "wide", "tasks": tasks})
    before_root = app.database_now()
    work(app, run_id, "root")

    def unread(*_: object) -> None:
        raise AssertionError("a large run's page reads its rows, not its whole audit log")

    monkeypatch.setattr(app, "run_history", unread)
    as_of = client.get(f"/runs/{run_id}", params={"at": timefmt.iso(app.database_now())})
    assert as_of.status_code == 200 and "ready 998" in as_of.text
    earlier = client.get(f"/runs/{run_id}", params={"at": timefmt.iso(before_root)})
    assert re.search(r'class="task state-ready" data-key="root"', _svg(earlier.text, "dag"))
    assert "pending 999" in earlier.text  # replayed from the changed tasks' own events
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert len(page.content) < 200_000  # no list of every task, no 1,000-box picture
    dag = _svg(page.text, "dag")
    assert dag.count('class="task ') == 2  # root and end; the middle layer is one box
    group = re.search(r'<g class="group" data-level="1">(.*?)</g>', dag, re.S)
    assert (
        group
        and "work \N{MULTIPLICATION SIGN}998" in group.group(1)
        and "ready 998" in group.group(1)
    )
    assert 'data-from="root" data-to=" level 1"' in dag
    bars = _svg(page.text, "timeline")  # root's claim, from its own events
    assert re.search(r'<g class="row" data-key="root">.*?class="bar state-succeeded"', bars, re.S)
    rows = re.findall(r'<tr data-key="([^"]+)">', page.text)
    assert rows == ["root"] + [f"t{i}" for i in range(49)]  # the first page of 50
    second = client.get(f"/runs/{run_id}", params={"tasks": "2"}).text
    assert re.findall(r'<tr data-key="([^"]+)">', second)[0] == "t49"
    assert "tasks 51 to 100 of 1000" in second


def test_a_live_run_page_patches_from_the_tasks_changed_since_its_cursor(
    app: FlowForge, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = app.start_workflow_run(CHAIN)
    page = client.get(f"/runs/{run_id}").text
    cursor = re.search(r'data-cursor="([^"]+)"', page)
    assert cursor and f'data-patch="/runs/{run_id}/tasks.json"' in page
    everything = client.get(f"/runs/{run_id}/tasks.json").json()
    assert set(everything["tasks"]) == {"extract", "load"}
    monkeypatch.setattr(pages, "PATCH_OVERLAP", timedelta(0))  # the cursor: the read's time
    time.sleep(0.01)  # SQLite's clock has millisecond steps
    since = client.get(f"/runs/{run_id}/tasks.json").json()["cursor"]
    quiet = client.get(f"/runs/{run_id}/tasks.json", params={"since": since}).json()
    assert quiet["tasks"] == {}
    work(app, run_id, "extract")
    changed = client.get(f"/runs/{run_id}/tasks.json", params={"since": since}).json()
    assert changed["tasks"] == {
        "extract": {"state": "succeeded", "attempt": 1},
        "load": {"state": "ready", "attempt": 1},  # made ready by extract's success
    }
    assert changed["counts"] == {"ready": 1, "succeeded": 1}
    assert changed["run_state"] == "running"


def test_the_grid_shows_each_tasks_state_in_each_run_of_a_workflow(
    app: FlowForge, client: TestClient
) -> None:
    first = app.start_workflow_run(CHAIN)
    work(app, first, "extract")
    second = app.start_workflow_run(CHAIN)
    other = app.start_workflow_run({"name": "other", "tasks": [{"key": "x", "type": "t"}]})
    page = client.get("/workflows/chain")
    assert page.status_code == 200
    grid = re.search(r'id="grid">(.*?)</table>', page.text, re.S)
    assert grid
    heads = re.findall(r'<a href="/runs/([0-9a-f-]+)"', grid.group(1))
    assert heads == [str(first), str(second)]  # the oldest on the left; other's not here
    assert str(other) not in page.text
    rows = dict(re.findall(r'<tr data-key="(\w+)"><th>\w+</th>(.*?)</tr>', grid.group(1), re.S))
    assert re.findall(r'class="cell state-(\w+)"', rows["extract"]) == ["succeeded", "ready"]
    assert re.findall(r'class="cell state-(\w+)"', rows["load"]) == ["ready", "pending"]
    assert client.get("/").text.count('href="/workflows/chain"') >= 1


def test_the_as_of_header_shows_the_moment_chosen_and_every_time_in_utc(
    app: FlowForge, client: TestClient
) -> None:
    run_id = app.start_workflow_run(CHAIN)
    moment = app.database_now()
    work(app, run_id, "extract")
    work(app, run_id, "load")
    assert app.get_workflow_run(run_id).finished_at is not None
    page = client.get(f"/runs/{run_id}", params={"at": timefmt.iso(moment)}).text
    header = re.search(r'id="header">(.*?)</dl>', page, re.S)
    assert header and f"<strong>{timefmt.iso(moment)}</strong> UTC" in header.group(1)
    finished = re.search(r"<dt>finished</dt><dd class=\"time\">(.*?)</dd>", header.group(1))
    assert finished and finished.group(1) == "-"  # not finished as of that moment
    assert "times in UTC" in page
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
    now = client.get(f"/runs/{run_id}").text
    shown = re.findall(r'<dd class="time">(.*?)</dd>', now)
    assert len(shown) == 3 and all(re.fullmatch(iso, t) for t in shown)
    task = client.get(f"/tasks/{task_id(app, run_id, 'load')}").text
    history = re.search(r'class="history">(.*?)</table>', task, re.S)
    assert history
    cells = re.findall(r"<tr><td>([^<]+)</td>", history.group(1))
    assert cells and all(re.fullmatch(iso, t) for t in cells)


def _svg(page: str, svg_id: str) -> str:
    found = re.search(rf'<svg class="\w+" id="{svg_id}".*?</svg>', page, re.S)
    assert found, f"no svg #{svg_id} on the page"
    return found.group(0)


# --- the submit and re-run actions ---------------------------------------------------------

CHAIN_TOML = """name = "chain"
[[tasks]]
key = "extract"
type = "work"
[[tasks]]
key = "load"
type = "work"
depends_on = ["extract"]
"""


def test_a_workflow_file_submitted_from_the_runs_page_starts_a_run(
    app: FlowForge, client: TestClient
) -> None:
    page = client.get("/").text
    assert 'action="/runs"' in page
    form = {"csrf_token": csrf_of(page), "format": "toml", "definition": CHAIN_TOML}
    done = client.post("/runs", data={**form, "inputs": '{"rows": 8}'})
    assert done.status_code == 200
    (run,) = app.every_run()
    assert (run.workflow_name, run.inputs) == ("chain", {"rows": 8})
    assert done.url.path == f"/runs/{run.id}"
    assert 'id="notice">submitted' in done.text
    as_json = '{"name": "one", "tasks": [{"key": "a", "type": "t"}]}'
    assert client.post("/runs", data={**form, "format": "json", "definition": as_json}).is_success
    assert sorted(r.workflow_name for r in app.every_run()) == ["chain", "one"]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"definition": "name = "}, "the form: invalid TOML"),
        ({"definition": 'name = "x"\n[[tasks]]\nkey = "a"'}, "the form: tasks[0].type"),
        ({"format": "yaml"}, "the form: 'yaml' is not a workflow file's format"),
        ({"inputs": "[1, 2]"}, "inputs: expected a JSON object"),
        ({"inputs": "{rows: 8}"}, "inputs: not valid JSON"),
        ({"inputs": '{"x": 1e999}'}, "inputs must be JSON"),
    ],
)
def test_a_bad_submission_is_refused_naming_the_problem_and_starts_nothing(
    app: FlowForge, client: TestClient, fields: dict[str, str], says: str
) -> None:
    form = {"csrf_token": csrf_of(client.get("/").text), "format": "toml"}
    refused = client.post("/runs", data={**form, "definition": CHAIN_TOML, **fields})
    assert refused.status_code == 400
    assert says in html.unescape(refused.text)
    assert app.every_run() == []


def test_submit_and_rerun_need_the_csrf_token(app: FlowForge, client: TestClient) -> None:
    run_id = finished_chain(app)
    for data in ({}, {"csrf_token": "guess"}):
        assert client.post("/runs", data={**data, "definition": CHAIN_TOML}).status_code == 403
        assert client.post(f"/runs/{run_id}/rerun", data=data).status_code == 403
    assert len(app.every_run()) == 1


def test_a_failed_run_is_rerun_from_its_page_carrying_over_what_succeeded(
    app: FlowForge, client: TestClient
) -> None:
    run_id = app.start_workflow_run({**CHAIN, "retry": {"max_attempts": 1}})
    work(app, run_id, "extract")
    work(app, run_id, "load", outcome="fail")
    app.schedule_once()
    assert app.get_workflow_run(run_id).state == "failed"
    page = client.get(f"/runs/{run_id}").text
    assert f'action="/runs/{run_id}/rerun"' in page
    done = client.post(f"/runs/{run_id}/rerun", data={"csrf_token": csrf_of(page)})
    assert done.status_code == 200
    new = next(r for r in app.every_run() if r.id != run_id)
    assert new.rerun_of == run_id
    assert done.url.path == f"/runs/{new.id}"
    states = {t.task_key: t.state for t in app.task_runs(new.id)}
    assert states == {"extract": "succeeded", "load": "ready"}  # carried over, runs again


def test_rerunning_a_run_that_has_not_ended_or_has_nothing_to_rerun_is_refused(
    app: FlowForge, client: TestClient
) -> None:
    running = app.start_workflow_run(CHAIN)
    token = csrf_of(client.get(f"/runs/{running}").text)
    refused = client.post(f"/runs/{running}/rerun", data={"csrf_token": token})
    assert refused.status_code == 409
    assert "only a finished run can be rerun" in refused.text
    succeeded = finished_chain(app)
    nothing = client.post(f"/runs/{succeeded}/rerun", data={"csrf_token": token})
    assert nothing.status_code == 409
    assert "a rerun would run nothing" in nothing.text
    unknown = client.post(f"/runs/{succeeded}/rerun", data={"csrf_token": token, "from": "x"})
    assert unknown.status_code == 400
    assert "has no task 'x' to run again" in html.unescape(unknown.text)
    assert len(app.every_run()) == 2


def test_a_succeeded_run_is_rerun_from_a_chosen_task(app: FlowForge, client: TestClient) -> None:
    run_id = finished_chain(app)
    page = client.get(f"/runs/{run_id}").text
    assert "every task that did not succeed" not in page  # nothing would run
    data = {"csrf_token": csrf_of(page), "from": "load"}
    assert client.post(f"/runs/{run_id}/rerun", data=data).status_code == 200
    new = next(r for r in app.every_run() if r.id != run_id)
    states = {t.task_key: t.state for t in app.task_runs(new.id)}
    assert states == {"extract": "succeeded", "load": "ready"}
