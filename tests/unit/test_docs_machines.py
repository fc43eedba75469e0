"""docs/machines.md is what tools/machine_tables.py writes from machines.py today.

The page is generated (``make docs``), never edited by hand: a table changed in the code
without regenerating the page fails here.
"""

from __future__ import annotations

import dataclasses

from flowforge.aggregates import machines, task_run, workflow_run
from tools import machine_tables


def test_the_committed_page_is_current() -> None:
    page = machine_tables.PAGE.read_text(encoding="utf-8")
    assert page == machine_tables.render(), "docs/machines.md is stale: run `make docs`"


def test_a_table_changed_without_regenerating_leaves_the_page_stale() -> None:
    # claim made to require a lease, as a careless edit of machines.py might.
    table = machines.TASK_RUN_MACHINE
    changed = machines.StateMachine(
        table.name,
        table.states,
        table.initial,
        table.terminal,
        [
            dataclasses.replace(t, requires_lease=t.name == "claim" or t.requires_lease)
            for t in table
        ],
    )
    sections = [
        (machines.WORKFLOW_RUN_MACHINE, workflow_run.EVENT_FOR_TRANSITION),
        (changed, task_run.EVENT_FOR_TRANSITION),
    ]
    page = machine_tables.render(sections)
    assert "| claim | ready | running | yes | `TaskRun.Claimed` |" in page
    assert "    ready --> running : claim (requires the lease)" in page
    assert page != machine_tables.PAGE.read_text(encoding="utf-8")
