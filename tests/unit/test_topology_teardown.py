"""tests/topology.py's teardown listing: ``rabbitmqctl`` failing for a moment on a busy
machine (exit 64) is retried, and one that keeps failing never errors the test."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests import topology


def fake_rabbitmqctl(
    monkeypatch: pytest.MonkeyPatch, failures: int, listing: str
) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if len(calls) <= failures:
            raise subprocess.CalledProcessError(64, command, stderr="timed out")
        return subprocess.CompletedProcess(command, 0, stdout=listing)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(topology, "LIST_RETRY_PAUSES_S", (0.0, 0.0, 0.0))
    return calls


def test_a_listing_that_fails_for_a_moment_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    config = topology.unique_broker_config()
    mine, theirs = config.queue_for("a"), "other.tasks.a"
    calls = fake_rabbitmqctl(monkeypatch, failures=2, listing=f"{mine}\n{theirs}\n")
    assert topology.task_queues(config) == [mine]
    assert len(calls) == 3


def test_a_listing_that_keeps_failing_gives_up_without_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = fake_rabbitmqctl(monkeypatch, failures=99, listing="")
    assert topology.task_queues(topology.unique_broker_config()) == []
    assert len(calls) == 4  # the first try and one per pause
