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
    app.schedule_once()
    for key in ("a", "b"):
        app.schedule_once()
        claim = app.claim_task_run(tasks[key], "w1", 30)
        assert claim is not None, key
        time.sleep(0.01)  # the slider needs the claim and the finish apart
        assert app.finish_task_run(tasks[key], claim.fencing_token, "succeed", {"ok": key})
    app.schedule_once()
    pending = app.start_workflow_run(definition)
    seeded = {
        "finished": str(finished),
        "a": str(tasks["a"]),
        "pending": str(pending),
        "url": url,
    }
    app.close()
    return seeded


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
    browser.get(f"{base}/tasks/{seeded['a']}")  # its failed attempt's error
    assert browser.execute_script("return window.flowforgeXss === undefined")
    assert XSS in browser.find_element("tag name", "body").text  # shown, as text


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
