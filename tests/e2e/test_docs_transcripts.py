"""docs/cli.md's transcripts run as written: each `$ flowforge ...` line, in the page's
order, through the real command in a scratch directory (the embedded default), and what
the page shows after it must appear in what the command printed, with ids, times,
durations and counts normalised, and its exit status must agree (an `error:` line, or a
run that "did not finish", is a failure). The ids and times a transcript shows are mapped
to the real ones as they appear, so a later command that names them (`status 5d668e5a`,
`why --at TIME`) asks about the same run and moment.

A transcript that cannot run here (it needs PostgreSQL and RabbitMQ, a cluster, a clock
of its own, or a database edited by hand) carries a marker on the line before its fence,
`<!-- transcript not run: why, and what runs it instead -->`; every other one runs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"
NOT_RUN = re.compile(r"^<!-- transcript not run: .+ -->$")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"
#: What varies from one run of a transcript to the next, in the order it is replaced.
VARYING = (
    # This installation's script, which the commands a command prints name when the
    # PATH does not find `flowforge` (cli/common.program_name).
    (re.compile(r"(?<![\w/])/\S*/flowforge\b"), "flowforge"),
    (re.compile(UUID), "<ID>"),
    (re.compile(ISO), "<TIME>"),
    (re.compile(r"\b\d\d:\d\d:\d\dZ"), "<CLOCK>"),
    # Who took an edge the worker's finish or a scheduler may take depends on timing.
    (re.compile(r"\bw\d+-[0-9a-f]{4}\b|\bworker-\d+\b|\bscheduler\b"), "<WORKER>"),
    (re.compile(r"\buser:\w+"), "<USER>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,12}\b"), "<ID>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:s|ms)\b|\b\d+m\d\ds\b"), "<DURATION>"),
    (re.compile(r"\b\d+\b"), "<N>"),
)
FILES = {
    "other.toml": 'name = "other"\n[[tasks]]\nkey = "guess"\ntype = "divine"\n',
    "bad.toml": 'name = "bad"\n[[tasks]]\nkey = "a"\ntype = "a"\ndepends_on = ["nope"]\n',
    "slow.toml": 'name = "slow"\n[[tasks]]\nkey = "wait"\ntype = "wait"\n',
    "slow_tasks.py": (
        "import time\nfrom flowforge import task\n\n\n@task('wait')\n"
        "def wait(ctx):\n    time.sleep(60)\n"
    ),
}


@dataclass
class Step:
    command: str
    shown: list[str]


@dataclass
class Transcript:
    line: int
    steps: list[Step]
    not_run: bool


def transcripts() -> list[Transcript]:
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    found: list[Transcript] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, end = i, lines.index("```", i + 1)
        body = lines[start + 1 : end]
        if any(line.startswith("$ ") for line in body):
            before = next((x for x in reversed(lines[:start]) if x.strip()), "")
            found.append(Transcript(start + 1, _steps(body), bool(NOT_RUN.match(before))))
        i = end + 1
    return found


def _steps(body: list[str]) -> list[Step]:
    steps: list[Step] = []
    for line in body:
        if line.startswith("$ "):
            steps.append(Step(line[2:], []))
        elif steps and steps[-1].command.endswith("\\"):
            steps[-1].command = steps[-1].command[:-1] + line.strip()
        elif steps:
            steps[-1].shown.append(line)
    return steps


#: A line of `run`'s progress: which changes it shows depends on its polls' timing
#: (docs/cli.md says a change faster than a poll may be skipped), so a shown one matches
#: any printed line about the same task or run.
PROGRESS = re.compile(r"^<CLOCK> ([^:]+):")


def normalised(line: str) -> str:
    for pattern, placeholder in VARYING:
        line = pattern.sub(placeholder, line)
    return " ".join(line.split())


def matches(shown: str, printed: str) -> bool:
    """Whether a printed (normalised) line is what a shown (normalised) one says."""
    if (progress := PROGRESS.match(shown)) is not None:
        return printed.startswith(progress.group())
    if shown.endswith("…"):
        return printed.startswith(shown.rstrip("…").rstrip())
    return printed == shown


class Session:
    """The scratch directory the page's commands run in, one after the other."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.copytree(ROOT / "examples", directory / "examples")
        for name, text in FILES.items():
            (directory / name).write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWFORGE_")}
        self.env = {**env, "PYTHONPATH": f"{directory}{os.pathsep}{ROOT}"}
        #: The page's ids and times, and the real ones they stand for.
        self.seen: dict[str, str] = {}

    def run(self, step: Step) -> tuple[int, list[str]]:
        command = step.command
        for shown, real in sorted(self.seen.items(), key=lambda kv: -len(kv[0])):
            command = command.replace(shown, real)
        words = shlex.split(command)
        assert words[0] == "flowforge", command
        done = subprocess.run(
            [sys.executable, "-m", "flowforge", *words[1:]],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.returncode, (done.stdout + done.stderr).splitlines()

    def learn(self, shown: str, printed: str) -> None:
        """The ids and times of a shown line, mapped to those of the printed line that
        matched it (a full id's short form too)."""
        pattern = re.compile(rf"{UUID}|{ISO}|\b(?=[0-9a-f]*\d)[0-9a-f]{{8}}\b")
        for page, real in zip(pattern.findall(shown), pattern.findall(printed), strict=False):
            self.seen.setdefault(page, real)
            if re.fullmatch(UUID, page) and re.fullmatch(UUID, real):
                self.seen.setdefault(page[-8:], real[-8:])


def check(session: Session, transcript: Transcript) -> None:
    for step in transcript.steps:
        code, printed = session.run(step)
        fails = any(line.startswith("error:") or "did not finish" in line for line in step.shown)
        where = f"docs/cli.md:{transcript.line}: `{step.command}`"
        assert (code != 0) == fails, (where, code, printed)
        by_form = {normalised(line): line for line in printed}
        for line in step.shown:
            form = normalised(line)
            if not form or form in ("...", "…"):
                continue
            match = next((p for f, p in by_form.items() if matches(form, f)), None)
            assert match is not None, (where, line, printed)
            session.learn(line, match)


def test_the_page_has_transcripts_and_marks_those_not_run() -> None:
    found = transcripts()
    assert len([t for t in found if not t.not_run]) >= 10
    assert all(t.steps for t in found)


def test_every_transcript_runs_as_written(tmp_path: Path) -> None:
    session = Session(tmp_path)
    for transcript in transcripts():
        if not transcript.not_run:
            check(session, transcript)


@pytest.mark.parametrize(
    ("shown", "printed"),
    [
        (
            "run 5d668e5a succeeded in 0.95s (0.94s running): 5 tasks",
            "run 1a2b3c4d succeeded in 1.2s (1.1s running): 5 tasks",
        ),
        ("03:26:16Z enrich: ready (attempt 1/3)", "08:00:01Z enrich: ready (attempt 1/3)"),
    ],
)
def test_a_line_matches_another_run_of_it(shown: str, printed: str) -> None:
    assert normalised(shown) == normalised(printed)


def test_a_line_that_says_something_else_does_not_match() -> None:
    assert normalised("enrich: ready -> succeeded") != normalised("enrich: ready -> failed")
