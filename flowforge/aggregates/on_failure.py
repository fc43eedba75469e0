"""What a task failed for good does to the rest of its run: the workflow definition's
``on_failure`` (docs/execution-model.md, "When a task fails for good").

A module of its own, with no import but the standard library's: the pure rules
(:mod:`flowforge.aggregates.rules`) use it, and the CLI's start-up imports those without
pydantic (tests/unit/cli/test_start_up.py).
"""

from __future__ import annotations

from enum import StrEnum


class OnFailure(StrEnum):
    """What a task failed for good does to the rest of its run (docs/execution-model.md,
    "When a task fails for good")."""

    #: The spec's rule: the run fails at once and every unfinished task is cancelled.
    FAIL_FAST = "fail_fast"
    #: An extension: the failed task's dependants are cancelled (upstream_failed), the
    #: tasks that do not depend on it run to the end, and the run fails when they have.
    FINISH_BRANCHES = "finish_branches"
