"""docs/observability.md and its Grafana dashboard agree with flowforge/metrics.py: the
dashboard queries only metrics FlowForge defines, and the page's table lists each one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from flowforge import metrics
from flowforge.metrics import DatabaseCollector

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "observability.md"
DASHBOARD = ROOT / "docs" / "observability" / "grafana-dashboard.json"
#: A histogram's and a counter's own series, by suffix.
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


@dataclass(frozen=True)
class NothingWaits:
    tasks_by_state: dict[str, int] = field(default_factory=dict)
    outbox_pending: int = 0
    outbox_oldest_age_s: float = 0.0


def defined() -> set[str]:
    """Every metric family flowforge/metrics.py defines (the database's gauges too)."""
    names = {instrument.name for instrument in metrics.INSTRUMENTS}
    names |= {family.name for family in DatabaseCollector(NothingWaits).collect()}
    return names


def family(series: str) -> str:
    for suffix in SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def test_the_dashboard_queries_only_metrics_flowforge_defines() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queried = {
        family(name)
        for panel in panels
        for target in panel["targets"]
        for name in re.findall(r"\bflowforge_[a-z_]+", target["expr"])
    }
    assert queried, "the dashboard queries nothing"
    assert queried <= defined(), queried - defined()


def test_the_page_lists_every_metric() -> None:
    listed = {
        family(name)
        for name in re.findall(r"^\| `(flowforge_[a-z_]+)`", PAGE.read_text(), re.MULTILINE)
    }
    assert listed == defined()
