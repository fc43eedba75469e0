"""Retention as configuration: a scheduler with ``FLOWFORGE_ARCHIVE_AFTER`` archives the
runs that aged out on its own pass, one archiver at a time (docs/operations.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from flowforge import config, errors
from flowforge.app.service import FlowForge
from flowforge.processes.scheduler import Scheduler
from tests.integration.test_archive import finished_runs, live_run


def test_a_scheduler_with_a_retention_archives_the_runs_that_aged_out(
    app: FlowForge, tmp_path: Path
) -> None:
    ended, live = finished_runs(app), live_run(app)
    retention = config.RetentionConfig(archive_after=timedelta(0), archive_dir=tmp_path / "a")

    Scheduler(app, retention=retention).step()

    (file,) = (tmp_path / "a").iterdir()
    assert file.name.startswith(f"flowforge-{app.deployment_id}-")
    for run in ended:
        with pytest.raises(errors.ArchivedRunError, match=file.name):
            app.get_workflow_run(run)
    assert app.get_workflow_run(live).state == "running"


def test_a_scheduler_leaves_the_archive_to_the_archiver_holding_the_lock(
    app: FlowForge, tmp_path: Path
) -> None:
    ended = finished_runs(app)
    retention = config.RetentionConfig(archive_after=timedelta(0), archive_dir=tmp_path / "a")

    with app.database.archiver_lock() as taken:
        assert taken
        Scheduler(app, retention=retention).step()

    assert not (tmp_path / "a").exists()
    assert {app.get_workflow_run(run).state for run in ended} <= {
        "succeeded",
        "failed",
        "cancelled",
    }


def test_a_retention_keeps_runs_younger_than_its_age(app: FlowForge, tmp_path: Path) -> None:
    ended = finished_runs(app)
    folder = tmp_path / "a"
    retention = config.RetentionConfig(archive_after=timedelta(days=30), archive_dir=folder)

    Scheduler(app, retention=retention).step()

    assert not folder.exists()
    assert len({app.get_workflow_run(run).id for run in ended}) == 3


def test_the_retention_settings_come_from_the_environment_and_a_bad_age_is_named() -> None:
    settings = config.Settings.from_env(
        {"FLOWFORGE_ARCHIVE_AFTER": "1d12h", "FLOWFORGE_ARCHIVE_DIR": "/var/lib/ff"}
    )
    assert settings.retention == config.RetentionConfig(
        archive_after=timedelta(days=1, hours=12), archive_dir=Path("/var/lib/ff")
    )
    assert config.Settings.from_env({}).retention is None
    with pytest.raises(errors.ConfigurationError, match="FLOWFORGE_ARCHIVE_AFTER"):
        config.Settings.from_env({"FLOWFORGE_ARCHIVE_AFTER": "a month"})
