"""``python -m bench.ui_large_run --sqlite`` (docs/ui.md, docs/performance.md) runs, at a
small size: every page it fetches answers 200 (the bench asserts it). Nothing is timed."""

from __future__ import annotations

import pytest

from bench import ui_large_run


def test_the_ui_bench_fetches_every_page_of_both_runs(capsys: pytest.CaptureFixture[str]) -> None:
    ui_large_run.main(["--tasks", "300", "--reps", "1", "--sqlite"])
    table = capsys.readouterr().out
    assert "as of its creation (all changed since)" in table and "300 tasks" in table
