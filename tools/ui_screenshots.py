"""Takes docs/ui/*.png, the screenshots docs/ui.md shows, in headless Chromium.

Run on demand (``python -m tools.ui_screenshots``; needs Debian's chromium and
chromium-driver): it seeds a SQLite database the way tests/e2e/test_ui_browser.py does,
starts the real `flowforge ui`, and photographs the runs page, a run (now and as of an
earlier moment), a task, a workflow's grid, a 1,000-task run, the DAG of a 200-task
fan-out and a run's timeline.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.e2e.test_cli import clean_environment
from tests.e2e.test_ui_browser import CHROMEDRIVER, CHROMIUM, free_port, seed

OUT = Path(__file__).resolve().parents[1] / "docs" / "ui"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'flowforge.db'}"
        seeded = seed(url)
        port = free_port()
        server = subprocess.Popen(  # noqa: S603  (this interpreter, fixed arguments)
            [sys.executable, "-m", "flowforge", "ui", "--port", str(port)],
            cwd=scratch,
            env=clean_environment(FLOWFORGE_DATABASE_URL=url),
        )
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,800"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            time.sleep(2)
            base = f"http://127.0.0.1:{port}"
            run = f"{base}/runs/{seeded['finished']}"
            for name, page in (
                ("runs", f"{base}/"),
                ("run", run),
                ("task", f"{base}/tasks/{seeded['a']}"),
                ("grid", f"{base}/workflows/pair"),
                ("run-1000", f"{base}/runs/{seeded['big']}"),
            ):
                driver.get(page)
                driver.save_screenshot(str(OUT / f"{name}.png"))
            driver.get(run)
            driver.execute_script(
                "const s = document.getElementById('slider'); s.value = 2;"
                "s.dispatchEvent(new Event('change'));"
            )
            time.sleep(1)
            driver.save_screenshot(str(OUT / "run-as-of.png"))
            driver.get(f"{base}/runs/{seeded['fan']}")  # the DAG of a 200-task fan-out
            driver.find_element("id", "dag").screenshot(str(OUT / "dag-200.png"))
            driver.get(run)
            driver.find_element("id", "timeline").screenshot(str(OUT / "timeline.png"))
        finally:
            driver.quit()
            server.terminate()
            server.wait(timeout=20)


if __name__ == "__main__":
    main()
