"""The workflow definition: tasks, dependencies, task types, retry policy, leases, timeouts.

A definition is checked in full when it is submitted (a cycle, an unknown dependency or a
duplicate task key is a clear error then, never at run time), and is immutable after.
Every model forbids unknown fields, so a misspelt field is an error, not a silent default.

The shape, as TOML (JSON is the same tree)::

    name = "etl"                 # a plain identifier
    description = "nightly load" # optional
    lease_seconds = 30           # optional: a worker's lease on a task, > 0
    timeout_seconds = 3600       # optional: an attempt running longer fails (none: no limit)
    max_running_tasks = 4        # optional: at most 4 tasks of one run run at once
    on_failure = "fail_fast"     # optional: or "finish_branches" (see OnFailure)
    max_worker_losses = 3        # optional: a task whose worker is lost (its lease
                                 # expires) this many times fails (WorkerLost)

    [retry]                      # optional: the policy of every task without its own
    max_attempts = 3             # attempts in all, including the first, >= 1
    backoff_seconds = 1.0        # delay after the first failure, >= 0
    backoff_multiplier = 2.0     # growth per further failure, >= 1
    backoff_cap_seconds = 60.0   # no delay is longer, >= 0
    jitter = 0.1                 # +/- this fraction of the delay, 0..1

    [[tasks]]                    # at least one
    key = "extract"              # a plain identifier, unique in the workflow
    type = "extract"             # a plain identifier naming a registered handler

    [[tasks]]
    key = "load"
    type = "load"
    depends_on = ["extract"]     # keys of other tasks of this workflow
    map_over = "extract"         # optional: a task run per element of extract's list result
    map_key = "id"               # optional, with map_over: element keys load[<its id>]
    lease_seconds = 120          # optional: overrides the workflow's
    timeout_seconds = 600        # optional: overrides the workflow's
    max_running = 2              # optional: start only while fewer than 2 tasks of
                                 # this type run (docs/scheduling/limits.md)
    max_worker_losses = 1        # optional: overrides the workflow's
    [tasks.retry]                # optional: this task's whole policy (fields not given
    max_attempts = 5             # take RetryPolicy's defaults, not the workflow's)

:func:`parse_definition` turns a mapping into a definition: every failure is an
``InvalidWorkflowDefinitionError`` with one line per problem, each naming the field path,
e.g. ``tasks[1].depends_on: unknown dependency 'c' of task 'b' (known: a, b)``. Building
the models directly raises pydantic's ``ValidationError`` (a ``ValueError``) with the
same text. The graph algorithms live in :mod:`flowforge.aggregates.dag`; reading a
``.toml`` / ``.json`` file (``load_definition``) in :mod:`flowforge.app.definition_files`.

Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from flowforge.aggregates import dag, mapping, validation_words
from flowforge.aggregates.definition_fields import Identifier, Text, problem
from flowforge.aggregates.lost_workers import DEFAULT_MAX_WORKER_LOSSES
from flowforge.aggregates.on_failure import OnFailure
from flowforge.errors import InvalidWorkflowDefinitionError

#: The longest delay any field accepts (a year): anything longer is a typo, and the
#: bound keeps every ``timedelta`` and database interval built from it inside its range.
MAX_SECONDS = 365 * 24 * 3600.0
#: The longest lease (a week): a worker renews it every third of it, so a longer one
#: only delays the reaper after a crash.
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
#: The longest execution timeout (a week, as the lease): an attempt that needs longer
#: is better split into tasks, and the bound keeps the deadline inside every range.
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0
#: Attempts are a 32-bit integer column; a policy that needs more is a loop, not a retry.
MAX_ATTEMPTS = 2**31 - 1
#: A concurrency limit is a 32-bit integer column.
MAX_RUNNING = 2**31 - 1
#: Lost workers are counted in a 32-bit integer column.
MAX_WORKER_LOSSES = 2**31 - 1
#: Growth per failure; past this the cap is reached on the second retry anyway.
MAX_BACKOFF_MULTIPLIER = 1000.0


class RetryPolicy(BaseModel):
    """How often a failed task is tried again, and how long to wait before each retry."""

    # Frozen: a definition is a value runs are created from; extra="forbid": a misspelt
    # field is an error; no inf/nan: they make nonsense delays and leases. Spelt out in
    # each class because the pydantic mypy plugin reads only a literal ConfigDict.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_attempts: int = Field(
        default=3,
        ge=1,
        le=MAX_ATTEMPTS,
        strict=True,
        description="attempts in all, the first included; 1: never retried",
    )
    backoff_seconds: float = Field(
        default=1.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        description="the delay before the first retry",
    )
    backoff_multiplier: float = Field(
        default=2.0,
        ge=1,
        le=MAX_BACKOFF_MULTIPLIER,
        strict=True,
        description="each further retry waits this many times longer",
    )
    backoff_cap_seconds: float = Field(
        default=60.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        description="no delay is longer",
    )
    jitter: float = Field(
        default=0.1,
        ge=0,
        le=1,
        strict=True,
        description="each delay is moved by up to this fraction of it, either way, at random",
    )

    def delay_for(self, failed_attempt: int, rand: float) -> timedelta:
        """The wait before retrying after attempt ``failed_attempt`` (1-based) failed.

        Exponential backoff, capped, then jittered by up to ``jitter`` of the delay either
        way and clamped to ``[0, cap]`` (at timedelta's microsecond resolution). The
        caller draws ``rand`` from ``[0, 1)``, so this stays pure and testable; spreading
        retries stops failed tasks from retrying in lockstep.
        """
        if failed_attempt < 1:
            raise ValueError(f"failed_attempt must be >= 1, got {failed_attempt}")
        if not 0.0 <= rand < 1.0:
            raise ValueError(f"rand must be in [0, 1), got {rand}")
        cap = self.backoff_cap_seconds
        delay = min(self._exponential(failed_attempt), cap)
        jittered = delay * (1 + self.jitter * (2 * rand - 1))
        return timedelta(seconds=min(max(jittered, 0.0), cap))

    def _exponential(self, failed_attempt: int) -> float:
        if self.backoff_seconds == 0:
            return 0.0  # and not 0 * inf = nan below
        try:
            return self.backoff_seconds * self.backoff_multiplier ** (failed_attempt - 1)
        except OverflowError:
            return math.inf  # far past any cap; min() takes the cap


class TaskDefinition(BaseModel):
    """One task of a workflow: what runs (``type``) and what must succeed first."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    key: Identifier = Field(description="the task's name, unique in the workflow")
    type: Identifier = Field(description="the task type: which registered handler runs it")
    depends_on: tuple[Text, ...] = Field(
        default=(), description="keys of the tasks that must succeed before it starts"
    )
    retry: RetryPolicy | None = Field(
        default=None, description="its own retry policy, whole (none: the workflow's)"
    )
    lease_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_LEASE_SECONDS,
        strict=True,
        description="its own lease (none: the workflow's)",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        strict=True,
        description="its own execution timeout (none: the workflow's, if any)",
    )
    max_running: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUNNING,
        strict=True,
        description="start only while fewer tasks of its type run, in every run "
        "(docs/scheduling/limits.md); none: no limit of its own",
    )
    max_worker_losses: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WORKER_LOSSES,
        strict=True,
        description="its own bound of lost workers (none: the workflow's)",
    )
    map_over: Identifier | None = Field(
        default=None,
        description="run once per element of this task's result, a JSON list (implies the "
        "dependency; an empty list: no run, its dependants get []); its dependants get the "
        "elements' results as a list",
    )
    map_key: Text | None = Field(
        default=None,
        description="with map_over: each element's key names its task run, process[<key>], "
        "instead of its index (a string or integer, unique; else MapOverError)",
    )

    @model_validator(mode="before")
    @classmethod
    def _map_over_implies_the_dependency(cls, data: Any) -> Any:
        return mapping.with_implied_dependency(data)

    @field_validator("depends_on")
    @classmethod
    def _dependencies_are_distinct_and_not_itself(
        cls, depends_on: tuple[str, ...], info: ValidationInfo
    ) -> tuple[str, ...]:
        problems = []
        key = info.data.get("key")  # absent when the key itself was invalid
        if key in depends_on:
            problems.append(f"task {key!r} depends on itself: dependency cycle {key} -> {key}")
        seen: set[str] = set()
        for dependency in depends_on:
            if dependency in seen:
                problems.append(f"duplicate dependency {dependency!r}: list each task once")
            seen.add(dependency)
        if problems:
            raise problem(*problems)
        return depends_on


class WorkflowDefinition(BaseModel):
    """A validated DAG of tasks, with the defaults its tasks inherit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Identifier = Field(description="the workflow's name")
    tasks: tuple[TaskDefinition, ...] = Field(description="its tasks, at least one")
    retry: RetryPolicy = Field(
        default_factory=RetryPolicy,
        description="the retry policy of every task without its own",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=MAX_LEASE_SECONDS,
        strict=True,
        description="a worker's lease on a task; its heartbeat renews it every third",
    )
    #: Distinct from the lease, which a heartbeat extends for as long as the worker is
    #: alive (docs/scheduling/timeouts.md).
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        strict=True,
        description="an attempt running longer fails (TimedOut); none: no timeout",
    )
    description: Text = Field(default="", description="free text, for people")
    max_running_tasks: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUNNING,
        strict=True,
        description="at most this many tasks of one run run at once; none: no limit",
    )
    on_failure: OnFailure = Field(
        default=OnFailure.FAIL_FAST,
        description=(
            "a task failed for good: fail_fast fails the run and cancels every unfinished "
            "task; finish_branches cancels only its dependants (upstream_failed), lets the "
            "other tasks finish, and fails the run when they have"
        ),
    )
    #: FlowForge's extension of the spec's reaper (docs/execution-model.md, "A worker
    #: lost too often"): without it a handler that kills its own process is reclaimed
    #: and run again for ever, since a reclaim spends no attempt.
    max_worker_losses: int = Field(
        default=DEFAULT_MAX_WORKER_LOSSES,
        ge=1,
        le=MAX_WORKER_LOSSES,
        strict=True,
        description="a task whose lease expires this many times (its worker lost: "
        "killed, crashed, out of memory) fails with WorkerLost, and so does each "
        "later loss; the retry policy applies to each failure",
    )
    max_map_elements: int = Field(
        default=mapping.DEFAULT_MAX_MAP_ELEMENTS,
        ge=1,
        le=mapping.MAX_MAP_ELEMENTS,
        strict=True,
        description="the longest list a mapped task expands (map_over): a longer result "
        "fails its upstream's attempt (MapOverError), nothing created",
    )

    @field_validator("tasks")
    @classmethod
    def _not_empty(cls, tasks: tuple[TaskDefinition, ...]) -> tuple[TaskDefinition, ...]:
        if not tasks:
            raise problem("a workflow needs at least one task")
        return tasks

    @model_validator(mode="after")
    def _is_a_dag(self) -> WorkflowDefinition:
        # All cross-task problems at once, so a user fixes a file in one round.
        if problems := dag.problems(self.tasks) + mapping.definition_problems(self.tasks):
            raise problem(*problems)
        return self

    @functools.cached_property
    def _tasks_by_key(self) -> Mapping[str, TaskDefinition]:
        # Built once per parsed definition: every per-task lookup (creating N task runs,
        # a worker's lease, a retry's policy) is then O(1), not a scan of N tasks.
        return MappingProxyType({task.key: task for task in self.tasks})

    @functools.cached_property
    def _dependents(self) -> Mapping[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {task.key: [] for task in self.tasks}
        for task in self.tasks:
            for dependency in task.depends_on:
                found[dependency].append(task.key)
        return MappingProxyType({key: tuple(keys) for key, keys in found.items()})

    def task(self, key: str) -> TaskDefinition:
        """The task called ``key`` (of ``process[3]``: ``process``), or a ``KeyError``."""
        task = self._tasks_by_key.get(key) or self._tasks_by_key.get(mapping.mapped_task_of(key))
        if task is None:
            raise KeyError(
                f"no task {key!r} in workflow {self.name!r} (known: {dag.keys(self.tasks)})"
            )
        return task

    def retry_policy_for(self, key: str) -> RetryPolicy:
        """The task's own policy, or else the workflow's."""
        retry = self.task(key).retry
        return retry if retry is not None else self.retry

    def lease_seconds_for(self, key: str) -> float:
        """The task's own lease, or else the workflow's."""
        lease = self.task(key).lease_seconds
        return lease if lease is not None else self.lease_seconds

    def timeout_seconds_for(self, key: str) -> float | None:
        """The task's own timeout, or else the workflow's (``None``: none)."""
        timeout = self.task(key).timeout_seconds
        return timeout if timeout is not None else self.timeout_seconds

    def max_worker_losses_for(self, key: str) -> int:
        """The task's own bound of lost workers, or else the workflow's."""
        bound = self.task(key).max_worker_losses
        return bound if bound is not None else self.max_worker_losses

    def topological_order(self) -> tuple[str, ...]:
        """Every task key, each after all its dependencies.

        Deterministic (Kahn's algorithm; among tasks that are ready together, the one
        defined first goes first), so runs of one definition list tasks identically.
        """
        return tuple(self.tasks[i].key for i in dag.kahn_order(self.tasks))

    def dependents(self, key: str) -> tuple[str, ...]:
        """The tasks that depend directly on ``key``, in definition order."""
        return self._dependents[self.task(key).key]  # KeyError for an unknown key

    @functools.cached_property
    def maps(self) -> Mapping[str, str]:
        """Each mapped task's key and the key it maps over (built once: every finish asks)."""
        return MappingProxyType({t.key: t.map_over for t in self.tasks if t.map_over})

    def mapped_over(self, key: str) -> tuple[str, ...]:
        """The tasks mapped over ``key``'s result (``map_over``), in definition order."""
        return tuple(m for m, over in self.maps.items() if over == key)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that ``WorkflowDefinition.model_validate`` turns back into
        an equal definition (how a run stores the definition it was created from)."""
        return self.model_dump(mode="json")


# --- validating user input -----------------------------------------------------------


def parse_definition(data: Mapping[str, Any], origin: str | None = None) -> WorkflowDefinition:
    """A validated definition from a mapping; else an ``InvalidWorkflowDefinitionError``
    with one line per problem, each naming the field path (after ``origin``, if given:
    the file it came from)."""
    try:
        return WorkflowDefinition.model_validate(dict(data))
    except ValidationError as exc:
        prefix = f"{origin}: " if origin else ""
        lines = [f"{prefix}{line}" for error in exc.errors() for line in _lines(error)]
        raise InvalidWorkflowDefinitionError("\n".join(lines)) from exc


def _lines(error: Mapping[str, Any]) -> list[str]:
    """One line per problem: ``field.path[i]: message``, in the file's words
    (``validation_words``). The cross-task checks run on the whole model (an empty
    location) and put the field path in their own text."""
    path = _field_path(error["loc"])
    text = validation_words.message(error, _known_keys())
    return [f"{path}: {line}" if path else line for line in text.splitlines()]


@functools.cache
def _known_keys() -> frozenset[str]:
    """Every key a workflow file may have, at any level: what an unknown one is
    compared with (``did you mean 'depends_on'?``)."""
    models = (WorkflowDefinition, TaskDefinition, RetryPolicy)
    return frozenset(name for model in models for name in model.model_fields)


def _field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path
