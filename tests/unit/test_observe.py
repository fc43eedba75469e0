"""The observer seam (flowforge/observe.py): every hook reaches every installed observer,
a run's creation and an attempt wrap each observer's part and end it on every path; with
nothing installed nothing is imported; and no module but the observers and the seam
counts or traces by itself (a scanner, tested against a bad line)."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from flowforge import observe

ROOT = Path(__file__).resolve().parents[2]
#: The modules that may name the observers' own modules: the observers and the install.
OBSERVER_MODULES = {"metrics.py", "tracing.py", "structured_logs.py", "observers.py"}
ATTEMPT = observe.Attempt(uuid4(), uuid4(), "extract", "http_get", 1, 1, "w1")
#: A value for each simple hook's arguments.
ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "transitions_committed": ([("task_run", "claim")],),
    "reconnected": ("broker",),
    "leases_reaped": (2,),
    "attempts_timed_out": (3,),
    "tasks_redispatched": ("queue_short", 7),
    "workers_lost_too_often": (2,),
    "dispatches_published": (4,),
    "dispatches_confirmed": (5,),
    "dispatches_returned": (6,),
    "claim_skipped": ("not ready",),
    "handler_returned": ("http_get", "succeed", 0.5),
    "stale_finish": (),
    "dead_lettered": (),
    "heartbeat_failed": (),
}
CONTEXT_HOOKS = {"run_creation", "attempt_started"}


def hooks() -> list[str]:
    return sorted(
        name
        for name, value in vars(observe.Observer).items()
        if not name.startswith("_") and callable(value)
    )


class Recorder(observe.Observer):
    """Records each simple hook it is told, and its part in runs and attempts."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        for name in ARGUMENTS:
            setattr(self, name, self._recording(name))

    def _recording(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, args))

    @contextmanager
    def _creation(self, creation: observe.RunCreation) -> Iterator[None]:
        creation.context = {"traceparent": "set"}
        try:
            yield
        except BaseException as exc:
            self.calls.append(("run failed", (type(exc).__name__,)))
            raise
        self.calls.append(("run", (creation.run_id, creation.was_created)))

    def run_creation(self, creation: observe.RunCreation) -> AbstractContextManager[None]:
        return self._creation(creation)

    def attempt_started(self, attempt: observe.Attempt) -> observe.AttemptObserver:
        return Part(self, attempt)


class Part:
    def __init__(self, recorder: Recorder, attempt: observe.Attempt) -> None:
        self.recorder, self.attempt = recorder, attempt

    @contextmanager
    def _current(self) -> Iterator[None]:
        self.recorder.calls.append(("current", (threading.current_thread().name,)))
        yield

    def current(self) -> AbstractContextManager[None]:
        return self._current()

    def end(self, outcome: str, error: Any = None) -> None:
        self.recorder.calls.append(("end", (outcome, error)))


@pytest.fixture
def two() -> Iterator[tuple[Recorder, Recorder]]:
    first, second = Recorder(), Recorder()
    with observe.installed(first), observe.installed(second):
        yield first, second


def test_every_hook_has_its_announcement_and_a_test_argument() -> None:
    assert set(hooks()) == set(ARGUMENTS) | CONTEXT_HOOKS
    announcer = {name for name in vars(observe.Announcer) if not name.startswith("_")}
    assert set(hooks()) <= announcer


def test_each_hook_reaches_every_installed_observer_in_order(
    two: tuple[Recorder, Recorder],
) -> None:
    for name, args in ARGUMENTS.items():
        getattr(observe.announce, name)(*args)
    for recorder in two:
        assert recorder.calls == list(ARGUMENTS.items())


def test_a_run_creation_wraps_each_observers_part_and_never_swallows_an_error(
    two: tuple[Recorder, Recorder],
) -> None:
    run_id = uuid4()
    with observe.announce.run_creation("etl", "user") as creation:
        assert creation.context == {"traceparent": "set"}
        creation.created(run_id, True)
    with pytest.raises(ValueError, match="bad"), observe.announce.run_creation("etl", "user"):
        raise ValueError("bad")
    for recorder in two:
        assert recorder.calls == [("run", (run_id, True)), ("run failed", ("ValueError",))]


def test_an_attempt_is_current_in_the_handlers_thread_and_ends_once_even_on_an_error(
    two: tuple[Recorder, Recorder],
) -> None:
    watch = observe.announce.attempt_started(ATTEMPT)
    handler = threading.Thread(target=lambda: watch.current().__enter__(), name="handler")
    handler.start()
    handler.join()
    assert watch.end("succeed") == "succeed"
    watch.end("fail")  # only the first end counts
    with pytest.raises(KeyError), observe.announce.attempt_started(ATTEMPT):
        raise KeyError("lost")
    for recorder in two:
        assert recorder.calls == [
            ("current", ("handler",)),
            ("end", ("succeed", None)),
            ("end", (observe.UNWRITTEN, {"type": "KeyError", "message": "'lost'"})),
        ]


def test_an_observer_uninstalled_is_told_nothing_more() -> None:
    recorder = Recorder()
    with observe.installed(recorder):
        observe.announce.stale_finish()
    observe.announce.stale_finish()
    assert recorder.calls == [("stale_finish", ())]
    assert recorder not in observe.announce.observers


def test_with_no_observer_a_process_imports_neither_prometheus_nor_opentelemetry() -> None:
    probe = """
import sys
from uuid import uuid4
from flowforge import observe, observers
import flowforge.processes.worker, flowforge.app.service, flowforge.projections.store
observers.install(traces_for="flowforge-worker")  # nothing asks for traces
announce = observe.announce
assert not announce.watched
announce.transitions_committed([("task_run", "claim")])
announce.claim_skipped("not ready")
with announce.run_creation("etl", "user") as run:
    run.created(uuid4(), True)
assert run.context is None
with announce.attempt_started(observe.Attempt(uuid4(), uuid4(), "k", "t", 1, 1, "w")) as w:
    with w.current():
        pass
    w.end("succeed")
loaded = [m for m in sys.modules if m.startswith(("prometheus_client", "opentelemetry"))]
assert not loaded, loaded
"""
    env = {"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "none"}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr


# --- the scanner: nothing but the observers counts or traces by itself ---------------------


def direct_uses(source: str) -> list[int]:
    """The lines of ``source`` that use ``flowforge.metrics`` or ``flowforge.tracing``
    themselves: an attribute of ``metrics`` / ``tracing``, or an import of them."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in {"metrics", "tracing"}
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
            if names & {"flowforge.metrics", "flowforge.tracing"}:
                lines.append(node.lineno)
        elif isinstance(node, ast.Import) and {a.name for a in node.names} & {
            "flowforge.metrics",
            "flowforge.tracing",
        }:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_but_the_observers_counts_or_traces_itself() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "flowforge").rglob("*.py"))
        if not (path.parent.name == "flowforge" and path.name in OBSERVER_MODULES)
        and (lines := direct_uses(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"announce through flowforge.observe instead: {found}"


@pytest.mark.parametrize(
    "line",
    [
        'metrics.CLAIMS_SKIPPED.labels("not ready").inc()',
        "began = tracing.now_ns()",
        "from flowforge import errors, metrics",
        "from flowforge.tracing import AttemptSpan",
        "import flowforge.metrics",
    ],
)
def test_the_scanner_finds_a_direct_count_or_trace(line: str) -> None:
    assert direct_uses(f"import logging\n{line}\n") == [2]
    assert direct_uses('observe.announce.claim_skipped("not ready")\n') == []
