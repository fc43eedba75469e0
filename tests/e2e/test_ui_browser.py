"""The web UI in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium), against the real `flowforge ui` process on a SQLite database: the
runs page opens a run; its DAG is coloured by state; moving the time slider shows a task
in the state it had then; a run is cancelled from its page; a handler's error message
that is `<script>` is shown as text and never runs; a run started by another process
appears on the runs page without a reload.

`.ci/run` installs the browser and sets REQUIRE_BROWSER=1, so that a missing browser
fails here instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support.ui import WebDriverWait

from flowforge.app.service import FlowForge
from tests.e2e.test_cli import clean_environment

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
XSS = "<script>window.flowforgeXss = 1</script>"
WAIT_S = 20.0


def require_browser() -> None:
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists() and shutil.which("chromium"):
        return
    message = f"headless Chromium is not installed ({CHROMIUM}, {CHROMEDRIVER})"
    if os.environ.get("REQUIRE_BROWSER"):
        pytest.fail(f"{message}; REQUIRE_BROWSER is set")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def seed(url: str) -> dict[str, str]:
    """Three runs: one that failed over a `<script>` message then succeeded, one whose
    `b` waits on `a` (for the slider), one pending (for the cancel)."""
    app = FlowForge(url, migrate=True)
    definition = {
        "name": "pair",
        "retry": {"max_attempts": 2, "backoff_seconds": 0},
        "tasks": [{"key": "a", "type": "t"}, {"key": "b", "type": "t", "depends_on": ["a"]}],
    }
    finished = app.start_workflow_run(definition)
    tasks = {t.task_key: t.id for t in app.task_runs(finished)}
    first = app.claim_task_run(tasks["a"], "w1", 30)
    assert first is not None
    error = {"type": "ValueError", "message": XSS}
    assert app.finish_task_run(tasks["a"], first.fencing_token, "fail", error=error)
    log = f"printed by a\n{XSS}"
    app.record_attempt_log(tasks["a"], first.fencing_token, attempt=1, worker_id="w1", output=log)
    app.schedule_once()
    for key in ("a", "b"):
        app.schedule_once()
        claim = app.claim_task_run(tasks[key], "w1", 30)
        assert claim is not None, key
        time.sleep(0.01)  # the slider needs the claim and the finish apart
        assert app.finish_task_run(tasks[key], claim.fencing_token, "succeed", {"ok": key})
    app.schedule_once()
    pending = app.start_workflow_run(definition)
    fan = app.start_workflow_run(fan_out(198))
    fan_tasks = {t.task_key: t.id for t in app.task_runs(fan)}
    claim = app.claim_task_run(fan_tasks["root"], "w1", 30)
    assert claim is not None
    assert app.finish_task_run(fan_tasks["root"], claim.fencing_token, "succeed", {"ok": 1})
    app.schedule_once()
    big = app.start_workflow_run(fan_out(998))
    live = app.start_workflow_run(definition)  # running: its a claimed, finished in a test
    live_a = next(t.id for t in app.task_runs(live) if t.task_key == "a")
    live_claim = app.claim_task_run(live_a, "w1", 300)
    assert live_claim is not None
    seeded = {
        "finished": str(finished),
        "a": str(tasks["a"]),
        "pending": str(pending),
        "fan": str(fan),
        "big": str(big),
        "live": str(live),
        "live_a": str(live_a),
        "live_token": str(live_claim.fencing_token),
        "url": url,
    }
    app.close()
    return seeded


def fan_out(n: int) -> dict[str, object]:
    """A root, ``n`` tasks after it, and one task after them all."""
    middle = [{"key": f"t{i}", "type": "process", "depends_on": ["root"]} for i in range(n)]
    end = {"key": "end", "type": "process", "depends_on": [f"t{i}" for i in range(n)]}
    return {"name": f"fan{n}", "tasks": [{"key": "root", "type": "process"}, *middle, end]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    require_browser()
    directory = tmp_path_factory.mktemp("ui")
    url = f"sqlite:///{directory / 'flowforge.db'}"
    seeded = seed(url)
    port = free_port()
    env = clean_environment(FLOWFORGE_DATABASE_URL=url)
    server = subprocess.Popen(
        [sys.executable, "-m", "flowforge", "ui", "--port", str(port)],
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "flowforge ui never listened"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", seeded
    finally:
        server.terminate()
        server.wait(timeout=WAIT_S)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def box_state(driver: Any, key: str) -> str:
    """The state class of task ``key``'s box in the DAG."""
    from selenium.webdriver.common.by import By

    group = driver.find_element(By.CSS_SELECTOR, f'#dag g.task[data-key="{key}"]')
    classes = str(group.get_attribute("class")).split()
    return next(c.removeprefix("state-") for c in classes if c.startswith("state-"))


def test_open_a_run_from_the_runs_page_and_see_its_dag_coloured_by_state(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(base + "/")
    link = browser.find_element(By.CSS_SELECTOR, f'a[href="/runs/{seeded["finished"]}"]')
    link.click()
    assert browser.current_url.endswith(f"/runs/{seeded['finished']}")
    assert (box_state(browser, "a"), box_state(browser, "b")) == ("succeeded", "succeeded")
    fill = browser.execute_script(
        "return getComputedStyle(document.querySelector('#dag g.task rect')).fill"
    )
    assert fill and fill != "none"  # the state's colour, from the stylesheet


def test_moving_the_time_slider_shows_a_task_as_it_was_then(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    base, seeded = served
    browser.get(f"{base}/runs/{seeded['finished']}")
    # The slider's second stop: the tasks were just created, b pending behind a.
    browser.execute_script(
        "const s = document.getElementById('slider'); s.value = 1;"
        "s.dispatchEvent(new Event('change'));"
    )
    deadline = time.monotonic() + WAIT_S
    while "at=" not in browser.current_url:
        assert time.monotonic() < deadline, "the slider never reloaded the page"
        time.sleep(0.05)
    # b waited on a until a succeeded, far later; a was somewhere in its first attempt.
    assert box_state(browser, "b") == "pending"
    assert box_state(browser, "a") in ("ready", "running", "failed", "retrying")


def test_a_run_is_cancelled_from_its_page(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(f"{base}/runs/{seeded['pending']}")
    browser.find_element(By.CSS_SELECTOR, "form.cancel button").click()
    # The POST's answer replaces the page: an element read meanwhile may go stale.
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda driver: driver.find_element(By.ID, "run-state").text == "cancelled"
    )
    assert box_state(browser, "a") == "cancelled"


def test_a_script_in_a_handlers_error_is_shown_as_text_and_never_runs(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    base, seeded = served
    browser.get(f"{base}/tasks/{seeded['a']}")  # its failed attempt's error, and its log
    assert browser.execute_script("return window.flowforgeXss === undefined")
    assert XSS in browser.find_element("tag name", "body").text  # shown, as text
    log = browser.find_element("css selector", "#attempt-1 pre.log").text
    assert log == f"printed by a\n{XSS}"  # beside the error it ended with, as text


def test_the_graph_zooms_with_its_buttons_its_keys_and_the_wheel(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    base, seeded = served
    browser.get(f"{base}/runs/{seeded['fan']}")
    width = "return document.getElementById('dag').getBoundingClientRect().width"
    actual = browser.execute_script(width)
    browser.find_element("css selector", '#dag-zoom button[data-zoom="in"]').click()
    assert browser.execute_script(width) == pytest.approx(actual * 1.25, abs=1)
    frame = browser.find_element("id", "dag-frame")
    frame.send_keys("-")  # its frame takes the keyboard's focus
    frame.send_keys("-")
    assert browser.execute_script(width) == pytest.approx(actual / 1.25, abs=1)
    assert browser.find_element("id", "dag-scale").text == "80%"
    browser.execute_script(
        "document.getElementById('dag-frame').dispatchEvent(new WheelEvent('wheel',"
        " {deltaY: -100, ctrlKey: true, bubbles: true, cancelable: true}))"
    )
    assert browser.execute_script(width) == pytest.approx(actual, abs=1)
    frame.send_keys("f")  # fits the frame: no wider than it
    assert browser.execute_script(width) <= frame.size["width"]


def test_the_runs_page_shows_a_new_run_without_reloading(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(base + "/")
    browser.execute_script("window.flowforgeStayed = 1")  # gone if the page reloads
    other = FlowForge(seeded["url"])  # another process's commit: the UI's poll sees it
    try:
        run_id = other.start_workflow_run({"name": "live", "tasks": [{"key": "a", "type": "t"}]})
    finally:
        other.close()
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda driver: driver.find_elements(By.CSS_SELECTOR, f'a[href="/runs/{run_id}"]')
    )
    assert browser.execute_script("return window.flowforgeStayed") == 1
    assert int(browser.execute_script("return document.body.dataset.refreshed")) >= 1


ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"

#: The boxes' rectangles on the page as the browser drew them, and the DAG's size.
BOXES_JS = """
const rects = [...document.querySelectorAll('#dag g.task > rect, #dag g.group > rect:first-child')]
  .map(r => { const b = r.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; });
const dag = document.getElementById('dag').getBoundingClientRect();
return {rects: rects, height: dag.height, width: dag.width};
"""


def test_a_200_task_fan_out_is_drawn_without_overlaps_with_arrowheads_and_bounded_height(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    base, seeded = served
    browser.get(f"{base}/runs/{seeded['fan']}")
    drawn = browser.execute_script(BOXES_JS)
    rects = drawn["rects"]
    assert len(rects) == 200  # every task its own box
    assert drawn["height"] <= 1200  # not one column 11,000 px tall: its layer wraps
    for i, (l1, t1, r1, b1) in enumerate(rects):
        for l2, t2, r2, b2 in rects[i + 1 :]:
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, "two boxes overlap"
    edges = browser.execute_script(
        "return [...document.querySelectorAll('#dag path.edge')]"
        ".map(p => [p.getAttribute('marker-end'), p.getTotalLength()])"
    )
    assert len(edges) == 2 * 198
    assert all(marker == "url(#arrow)" and length > 0 for marker, length in edges)
    arrow = browser.execute_script(
        "const m = document.querySelector('#dag marker#arrow path');"
        "return m && getComputedStyle(m).fill"
    )
    assert arrow and arrow != "none"  # the arrowhead is drawn, in the stylesheet's colour
    assert box_state(browser, "root") == "succeeded" and box_state(browser, "t7") == "ready"


def test_a_1000_task_run_loads_grouped_and_its_load_time_is_reported(
    served: tuple[str, dict[str, str]], browser: Any, record_property: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(f"{base}/runs/{seeded['big']}")
    timing = browser.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return {response: n.responseEnd - n.requestStart, loaded: n.loadEventEnd,"
        " bytes: n.transferSize}"
    )
    record_property("page_load_ms_1000_tasks", round(timing["loaded"]))
    print(  # in the test's report with -s or -rA: a 1,000-task run's page in the browser
        f"\n1,000-task run page: response {timing['response']:.0f} ms, "
        f"loaded {timing['loaded']:.0f} ms, {timing['bytes']:,} bytes"
    )
    group = browser.find_element(By.CSS_SELECTOR, '#dag g.group[data-level="1"]')
    assert "process \N{MULTIPLICATION SIGN}998" in group.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")) == 50  # paged


def test_the_grid_shows_runs_as_columns_and_tasks_as_rows(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(base + "/")
    browser.find_element(By.CSS_SELECTOR, 'a[href="/workflows/pair"]').click()
    assert browser.current_url.endswith("/workflows/pair")
    heads = browser.find_elements(By.CSS_SELECTOR, "#grid thead a")
    assert heads[0].get_attribute("href").endswith(f"/runs/{seeded['finished']}")  # oldest
    cells = browser.find_elements(By.CSS_SELECTOR, '#grid tr[data-key="a"] td.cell')
    assert len(cells) == len(heads) >= 3
    assert "state-succeeded" in str(cells[0].get_attribute("class"))
    colour = browser.execute_script(
        "return getComputedStyle(arguments[0]).backgroundColor", cells[0]
    )
    assert colour not in ("", "rgba(0, 0, 0, 0)")


def test_the_timeline_has_a_time_axis_in_utc_and_a_bar_per_attempt(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    import re

    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(f"{base}/runs/{seeded['finished']}")
    ticks = browser.find_elements(By.CSS_SELECTOR, "#timeline #axis g.tick text")
    assert len(ticks) >= 2
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d{3})?", t.text) for t in ticks)
    assert "UTC" in browser.find_element(By.ID, "axis").text
    bars = browser.find_elements(By.CSS_SELECTOR, '#timeline g.row[data-key="a"] g.bar')
    assert [b.get_attribute("data-attempt") for b in bars] == ["1", "2"]  # a retry
    assert "state-failed" in str(bars[0].get_attribute("class"))
    waits = browser.find_elements(By.CSS_SELECTOR, '#timeline g.row[data-key="a"] line.wait')
    assert len(waits) >= 1
    errors = browser.find_element(By.CSS_SELECTOR, '#tasks tr[data-key="a"] td.attempts').text
    assert XSS in errors  # the first attempt's error beside it, as text


def test_every_time_on_a_run_page_is_iso_utc_and_the_page_says_so(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    import re

    from selenium.webdriver.common.by import By

    base, seeded = served
    browser.get(f"{base}/runs/{seeded['finished']}")
    assert "times in UTC" in browser.find_element(By.ID, "tz").text
    times = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#header dd.time")]
    assert len(times) == 3 and all(re.fullmatch(ISO, t) for t in times)
    moments = browser.execute_script(
        "return JSON.parse(document.getElementById('slider').dataset.moments)"
    )
    assert all(re.fullmatch(ISO, m) for m in moments)
    browser.get(f"{base}/runs/{seeded['finished']}?at={moments[1]}")
    assert moments[1] in browser.find_element(By.ID, "header-at").text  # the moment chosen
    finished = browser.find_elements(By.CSS_SELECTOR, "#header dd.time")[2].text
    assert finished == "-"  # it had not finished then


def test_a_live_run_page_patches_a_tasks_box_without_reloading(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    base, seeded = served
    browser.get(f"{base}/runs/{seeded['live']}")
    assert box_state(browser, "a") == "running"
    browser.execute_script("window.flowforgeStayed = 1")  # gone if the page reloads
    other = FlowForge(seeded["url"])  # another process finishes a: the poll sees it
    try:
        token = int(seeded["live_token"])
        assert other.finish_task_run(UUID(seeded["live_a"]), token, "succeed", {"ok": 1})
    finally:
        other.close()
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda driver: box_state(driver, "a") == "succeeded"
    )
    from selenium.webdriver.common.by import By

    row = browser.find_element(By.CSS_SELECTOR, '#tasks tr[data-key="a"] span.state').text
    assert row == "succeeded"  # its row patched too
    assert browser.execute_script("return window.flowforgeStayed") == 1
    assert int(browser.execute_script("return document.body.dataset.patched")) >= 1
    assert browser.execute_script("return document.body.dataset.refreshed") is None
