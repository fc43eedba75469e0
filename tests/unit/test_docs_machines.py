"""docs/execution-model.md shows the state machines exactly as machines.py defines them.

The page's mermaid diagrams and transition tables are parsed and compared with the tables
in both directions (an edge missing from the page fails, and so does an extra one), as is
its table of event classes. Each check is also run against deliberately drifted copies of
the page, so that the parser cannot silently stop seeing what it compares.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from flowforge.aggregates import task_run, workflow_run
from flowforge.aggregates.machines import TASK_RUN_MACHINE, WORKFLOW_RUN_MACHINE, StateMachine

DOC = Path(__file__).resolve().parents[2] / "docs" / "execution-model.md"
MACHINES = {"WorkflowRun": WORKFLOW_RUN_MACHINE, "TaskRun": TASK_RUN_MACHINE}
LEASE_TABLE_HEADER = ["Transition", "Source", "Target", "Requires lease"]
EVENT_TABLE_HEADER = ["Transition", "Event"]

HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)
START = "[*]"
ARROW = re.compile(r"^(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::\s*(.*))?$")

Row = tuple[str, ...]
H = TypeVar("H", bound=Hashable)


@dataclass
class DocMachine:
    """What one machine's section of the page says."""

    edges: list[tuple[str, str, str]] = field(default_factory=list)
    initial: list[str] = field(default_factory=list)
    terminal: list[str] = field(default_factory=list)
    rows: list[tuple[str, str, str, bool]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# --- parsing ----------------------------------------------------------------------------


def sections(text: str) -> dict[str, str]:
    """Each level-2 or level-3 heading's text, mapped to the text up to the next one."""
    marks = list(HEADING.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return {m.group(2): text[m.end() : end] for m, end in zip(marks, ends, strict=True)}


def state_diagrams(text: str) -> list[list[str]]:
    """The lines of every mermaid ``stateDiagram-v2`` block, without the header."""
    diagrams = []
    for block in FENCE.findall(text):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if lines and lines[0] == "stateDiagram-v2":
            diagrams.append(lines[1:])
    return diagrams


def tables(text: str, header: list[str]) -> list[list[Row]]:
    """The body rows of every markdown table whose header is ``header``."""
    found: list[list[Row]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _cells(line) != tuple(header):
            continue
        body = []
        for row in lines[i + 2 :]:  # skip the |---| separator
            if not row.startswith("|"):
                break
            body.append(_cells(row))
        found.append(body)
    return found


def _cells(line: str) -> Row:
    if not line.startswith("|"):
        return ()
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def parse_machine(section: str) -> DocMachine:
    doc = DocMachine()
    diagrams = state_diagrams(section)
    lease_tables = tables(section, LEASE_TABLE_HEADER)
    if len(diagrams) != 1:
        doc.problems.append(f"expected one stateDiagram-v2, found {len(diagrams)}")
    if len(lease_tables) != 1:
        doc.problems.append(f"expected one transition table, found {len(lease_tables)}")
    for line in diagrams[0] if diagrams else []:
        _parse_diagram_line(line, doc)
    for cells in lease_tables[0] if lease_tables else []:
        _parse_table_row(cells, doc)
    return doc


def _parse_diagram_line(line: str, doc: DocMachine) -> None:
    if line.startswith("%%"):
        return
    match = ARROW.match(line)
    if not match:
        doc.problems.append(f"diagram line not understood: {line!r}")
        return
    source, target, label = match.groups()
    if source == START:
        doc.initial.append(target)
    elif target == START:
        doc.terminal.append(source)
    elif label and (name := re.match(r"\w+", label)):
        doc.edges.append((name.group(0), source, target))
    else:
        doc.problems.append(f"diagram edge without a transition name: {line!r}")


def _parse_table_row(cells: Row, doc: DocMachine) -> None:
    if len(cells) != 4:
        doc.problems.append(f"table row without four cells: {cells!r}")
        return
    name, source, target, lease = cells
    flag = re.match(r"(yes|no)\b", lease)
    if not flag:
        doc.problems.append(f"{name}: 'Requires lease' is neither yes nor no: {lease!r}")
        return
    doc.rows.append((name, source, target, flag.group(1) == "yes"))


# --- comparing ----------------------------------------------------------------------------


def _both_ways(what: str, in_doc: list[H], in_code: set[H]) -> list[str]:
    problems = [f"{what}: {item} missing from the doc" for item in in_code - set(in_doc)]
    problems += [
        f"{what}: {item} in the doc but not in the code" for item in set(in_doc) - in_code
    ]
    problems += [f"{what}: {item} appears twice" for item, n in Counter(in_doc).items() if n > 1]
    return sorted(problems)


def machine_differences(machine: StateMachine, doc: DocMachine) -> list[str]:
    edges = {(t.name, t.source.value, t.target.value) for t in machine}
    rows = {(t.name, t.source.value, t.target.value, t.requires_lease) for t in machine}
    terminal = {s.value for s in machine.terminal}
    return [
        *doc.problems,
        *_both_ways("diagram edge", list(doc.edges), edges),
        *_both_ways("diagram initial state", list(doc.initial), {machine.initial.value}),
        *_both_ways("diagram terminal state", list(doc.terminal), terminal),
        *_both_ways("table row", list(doc.rows), rows),
    ]


def event_differences(text: str) -> list[str]:
    found = tables(text, EVENT_TABLE_HEADER)
    if len(found) != 1:
        return [f"expected one event table, found {len(found)}"]
    if bad := [row for row in found[0] if len(row) != 2]:
        return [f"event table rows without two cells: {bad}"]
    in_doc = [(name, event.strip("`")) for name, event in found[0]]
    in_code = {
        (name, cls.__qualname__)
        for mapping in (workflow_run.EVENT_FOR_TRANSITION, task_run.EVENT_FOR_TRANSITION)
        for name, cls in mapping.items()
    }
    return _both_ways("event", list(in_doc), set(in_code))


def differences(text: str) -> list[str]:
    """Everything on the page that does not match machines.py and the event maps."""
    problems = []
    by_heading = sections(text)
    for name, machine in MACHINES.items():
        if name not in by_heading:
            problems.append(f"no '### {name}' section")
            continue
        problems += [
            f"{name}: {p}" for p in machine_differences(machine, parse_machine(by_heading[name]))
        ]
    # A third, stale copy anywhere else on the page would also drift.
    if (n := len(state_diagrams(text))) != len(MACHINES):
        problems.append(f"the page has {n} stateDiagram-v2 blocks, not {len(MACHINES)}")
    if (n := len(tables(text, LEASE_TABLE_HEADER))) != len(MACHINES):
        problems.append(f"the page has {n} transition tables, not {len(MACHINES)}")
    return problems + event_differences(text)


# --- the page itself ------------------------------------------------------------------


@pytest.fixture(scope="module")
def page() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_page_shows_both_machines_exactly_as_the_code_defines_them(page: str) -> None:
    assert differences(page) == []


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_the_parser_sees_every_edge_of_each_machine_on_the_page(page: str, name: str) -> None:
    doc = parse_machine(sections(page)[name])
    assert len(doc.edges) == len(doc.rows) == len(MACHINES[name])


# --- the check fails on a drifted page --------------------------------------------------


def drift(page: str, old: str, new: str) -> str:
    assert page.count(old) == 1, f"the sabotage must hit exactly one place: {old!r}"
    return page.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            "| retry_ready | retrying | ready | no |\n",
            "",
            "TaskRun: table row: ('retry_ready', 'retrying', 'ready', False) missing",
            id="a-missing-table-row",
        ),
        pytest.param(
            "| retry_ready | retrying | ready | no |\n",
            "| retry_ready | retrying | ready | no |\n| retry_now | failed | ready | no |\n",
            "TaskRun: table row: ('retry_now', 'failed', 'ready', False) in the doc but not",
            id="an-extra-table-row",
        ),
        pytest.param(
            "| succeed | running | succeeded | yes |",
            "| succeed | running | succeeded | no |",
            "TaskRun: table row: ('succeed', 'running', 'succeeded', False) in the doc",
            id="a-wrong-lease-flag",
        ),
        pytest.param(
            "| claim | ready | running |",
            "| claim | ready | retrying |",
            "TaskRun: table row: ('claim', 'ready', 'running', False) missing",
            id="a-wrong-target-in-the-table",
        ),
        pytest.param(
            "| start | pending | running | no |\n",
            "| start | pending | running | no |\n| start | pending | running | no |\n",
            "WorkflowRun: table row: ('start', 'pending', 'running', False) appears twice",
            id="a-duplicated-table-row",
        ),
        pytest.param(
            "    retrying --> ready : retry_ready (once due)\n",
            "",
            "TaskRun: diagram edge: ('retry_ready', 'retrying', 'ready') missing",
            id="a-missing-diagram-edge",
        ),
        pytest.param(
            "    retrying --> ready : retry_ready (once due)\n",
            "    retrying --> ready : retry_ready (once due)\n    failed --> ready : retry_now\n",
            "TaskRun: diagram edge: ('retry_now', 'failed', 'ready') in the doc but not",
            id="an-extra-diagram-edge",
        ),
        pytest.param(
            "    pending --> cancelled : cancel_before_start\n",
            "    pending --> cancelled : cancel\n",
            "WorkflowRun: diagram edge: ('cancel', 'pending', 'cancelled') in the doc but not",
            id="a-wrong-name-in-the-diagram",
        ),
        pytest.param(
            "    succeeded --> [*]\n    failed --> [*]\n",
            "    succeeded --> [*]\n",
            "WorkflowRun: diagram terminal state: failed missing",
            id="a-missing-terminal-state",
        ),
        pytest.param(
            "    succeeded --> [*]\n    cancelled --> [*]\n",
            "    succeeded --> [*]\n    failed --> [*]\n    cancelled --> [*]\n",
            "TaskRun: diagram terminal state: failed in the doc but not in the code",
            id="failed-drawn-as-terminal-for-a-task-run",
        ),
        pytest.param(
            "    pending --> ready : dependencies_satisfied\n",
            "    pending --> ready\n",
            "TaskRun: diagram edge without a transition name: 'pending --> ready'",
            id="an-unnamed-diagram-edge",
        ),
        pytest.param(
            "| claim | `TaskRun.Claimed` |",
            "| claim | `TaskRun.Started` |",
            "event: ('claim', 'TaskRun.Claimed') missing from the doc",
            id="a-wrong-event-class",
        ),
        pytest.param(
            "### TaskRun\n",
            "### Task runs\n",
            "no '### TaskRun' section",
            id="a-renamed-section",
        ),
    ],
)
def test_a_drifted_page_is_caught_naming_the_drift(
    page: str, old: str, new: str, expected: str
) -> None:
    problems = differences(drift(page, old, new))
    assert any(p.startswith(expected) for p in problems), problems


def test_a_stale_third_diagram_elsewhere_on_the_page_is_caught(page: str) -> None:
    stale = "\n## Old notes\n\n```mermaid\nstateDiagram-v2\n    [*] --> pending\n```\n"
    problems = differences(page + stale)
    assert "the page has 3 stateDiagram-v2 blocks, not 2" in problems
