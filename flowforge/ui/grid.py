"""The grid of one workflow's runs (``/workflows/NAME``): runs as columns (the newest on
the right), tasks as rows, each cell that task's state in that run, so a task that fails
across runs shows as a row of red. Bounded at any size: at most ``RUNS`` runs, and a
page of ``TASKS`` tasks (read by key from each run, never a run's every task)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowforge import timefmt
from flowforge.aggregates.ids import short_id
from flowforge.app.results import TaskRunView, WorkflowRunView
from flowforge.app.service import FlowForge

#: The newest runs of the workflow shown, and the runs looked through to find them.
RUNS = 25
WINDOW = 1000
TASKS = 50


@dataclass(frozen=True, slots=True)
class Cell:
    task: TaskRunView | None

    @property
    def state(self) -> str:
        return self.task.state if self.task else "none"


def grid_page(app: FlowForge, name: str, page: int = 1) -> dict[str, Any]:
    """The newest ``RUNS`` runs of workflow ``name``, oldest first, and a page of their
    tasks (the newest run's definition order, then keys only older runs had)."""
    runs = [r for r in app.recent_runs(WINDOW) if r.workflow_name == name][:RUNS][::-1]
    keys: list[str] = []
    seen: set[str] = set()
    for run in reversed(runs):
        for task in run.definition.get("tasks", []):
            key = str(task.get("key", ""))
            if key and key not in seen:
                seen.add(key)
                keys.append(key)
    pages = max(1, -(-len(keys) // TASKS))
    page = min(max(1, page), pages)
    shown = keys[(page - 1) * TASKS : page * TASKS]
    found: dict[tuple[int, str], TaskRunView] = {}
    for i, run in enumerate(runs):
        for task in app.task_runs_by_keys(run.id, shown):
            found[(i, task.task_key)] = task
    return {
        "name": name,
        "runs": [_column(r) for r in runs],
        "rows": [
            {"key": k, "cells": [Cell(found.get((i, k))) for i in range(len(runs))]} for k in shown
        ],
        "task_count": len(keys),
        "page": page,
        "pages": pages,
        "limit": RUNS,
    }


def _column(run: WorkflowRunView) -> dict[str, Any]:
    return {"run": run, "short": short_id(run.id), "created": timefmt.iso(run.created_at)}
