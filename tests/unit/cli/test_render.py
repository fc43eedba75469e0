"""What the CLI prints, within 80 columns at the sizes users have (issue #49)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from flowforge.app.results import AuditEntry
from flowforge.cli import render

AT = datetime(2026, 12, 5, 5, 24, 37, 571000, tzinfo=UTC)
#: A production worker's id: a Kubernetes pod's name, then the random suffix.
POD_WORKER = "flowforge-worker-7d9f8c6b5-x2k4j-1a2b3c4d"


def entry(transition: str, actor: str, source: str | None = "running") -> AuditEntry:
    return AuditEntry(
        AT, "task_run", uuid.uuid4(), 3, "Event", transition, source, "ready", actor,
        task_key="extract", attempt=2, fencing_token=12,
    )  # fmt: skip


def test_history_fits_80_columns_with_production_worker_ids() -> None:
    entries = [entry("claim", POD_WORKER), entry("renew_lease", POD_WORKER)]
    entries.append(entry("schedule_retry", "scheduler"))
    lines = render.history_lines(entries)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert "flowf…1a2b3c4d" in lines[1]  # its start and its distinguishing end
    assert "scheduler" in lines[3]


def test_a_short_actor_is_shown_whole() -> None:
    assert render.short_actor("w1-e3b5") == "w1-e3b5"
    assert render.short_actor("user:alice") == "user:alice"
    assert len(render.short_actor(POD_WORKER)) == render.HISTORY_ACTOR_WIDTH


def test_a_mistyped_command_gets_one_error_line_and_the_closest_name() -> None:
    import contextlib
    import io

    import pytest

    from flowforge.cli import parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as code:
        parser.build().parse_args(["sbumit", "x"])
    assert code.value.code == 2
    first, second = err.getvalue().splitlines()
    assert first.startswith("error: argument COMMAND: invalid choice: 'sbumit'")
    assert first.endswith("; did you mean 'submit'?")
    assert second == "       see `flowforge --help`"


def test_an_at_error_has_no_usage_block_before_it() -> None:
    import contextlib
    import io

    import pytest

    from flowforge.cli import parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser.build().parse_args(["submit", "wf.toml", "--at", "yesterday"])
    assert err.getvalue().startswith("error: argument --at: 'yesterday' is not an ISO 8601")
    assert "usage:" not in err.getvalue()


def test_a_duration_is_never_negative_and_one_task_is_singular() -> None:
    from flowforge import timefmt
    from flowforge.cli import runs

    assert timefmt.duration(-0.001) == "0.00s"  # printed -0.00s (issue #49)
    assert runs.count(1, "task") == "1 task"
    assert runs.count(2, "attempt") == "2 attempts"


def test_every_commands_help_wraps_within_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #49: a description was printed as one line of up to 531 characters."""
    import contextlib
    import io

    from flowforge.cli import parser

    monkeypatch.setenv("COLUMNS", "80")
    names = [[c.name] for c in parser.COMMANDS] + [["db", "archive"], ["schedule", "add"], []]
    for argv in names:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            parser.build().parse_args([*argv, "--help"])
        long = [line for line in out.getvalue().splitlines() if len(line) > 80]
        assert long == [], (argv, long)
