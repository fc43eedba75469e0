"""Why the scheduler cancelled a task because another one failed for good: the cause
its cancel event records, in the task's ``error`` (docs/execution-model.md, "When a task
fails for good").

A user's cancel records none. The scheduler's two records:

- ``upstream_failed`` (``on_failure = "finish_branches"``): the task depends, directly
  or through others, on the task that failed for good; the rest of the run goes on.
- ``run_failed`` (fail-fast, the default): the run failed when that task failed for good,
  and every unfinished task was cancelled with it, whatever it depends on.

The cause is an error dict as a handler's is (``type`` and ``message``, which the CLI,
the UI and ``--json`` already show), plus ``reason`` and ``failed_task``: what
``status``, ``history`` and ``why`` read back. An event stored before causes were
recorded carries none; it still decodes, and reads as a cancel without a cause.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final

UPSTREAM_FAILED: Final = "upstream_failed"
RUN_FAILED: Final = "run_failed"
_TYPES: Final = {UPSTREAM_FAILED: "UpstreamFailed", RUN_FAILED: "RunFailed"}


@dataclass(frozen=True, slots=True)
class CancelCause:
    """Why a task was cancelled: ``reason`` (``upstream_failed`` or ``run_failed``) and
    the task that failed for good (``failed_task``)."""

    reason: str
    failed_task: str

    def error(self) -> dict[str, str]:
        """The cause as the cancel records it, in the task's ``error``."""
        if self.reason == UPSTREAM_FAILED:
            message = (
                f"cancelled: it depends on {self.failed_task}, which failed for good "
                f'(on_failure = "finish_branches")'
            )
        else:
            message = f"cancelled: the run failed when {self.failed_task} failed (fail-fast)"
        return {
            "type": _TYPES[self.reason],
            "message": message,
            "reason": self.reason,
            "failed_task": self.failed_task,
        }

    def short(self) -> str:
        """``upstream_failed: b1`` / ``run failed when b1 failed``: for ``status`` and
        ``history``."""
        if self.reason == UPSTREAM_FAILED:
            return f"{UPSTREAM_FAILED}: {self.failed_task}"
        return f"run failed when {self.failed_task} failed"


def cause_of(error: Mapping[str, str] | None) -> CancelCause | None:
    """The cause a cancel recorded in ``error``; ``None`` for a user's cancel, an event
    stored before causes, or any other error."""
    if not error:
        return None
    reason, failed = error.get("reason"), error.get("failed_task")
    if reason not in _TYPES or not failed or error.get("type") != _TYPES[reason]:
        return None
    return CancelCause(reason, failed)


def failed_upstream(
    key: str, failed: Collection[str], depends_on: Mapping[str, Collection[str]]
) -> str | None:
    """The first task of ``failed`` that ``key`` depends on, directly or through others
    (its dependencies searched in their declared order, depth first); ``None`` if none."""
    seen: set[str] = set()
    stack = list(reversed(list(depends_on.get(key, ()))))
    while stack:
        dependency = stack.pop()
        if dependency in seen:
            continue
        seen.add(dependency)
        if dependency in failed:
            return dependency
        stack.extend(reversed(list(depends_on.get(dependency, ()))))
    return None
