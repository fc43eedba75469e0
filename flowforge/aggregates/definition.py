"""The workflow definition: tasks, their dependencies, task types, retry policy and leases.

A definition is checked in full when it is submitted (a cycle, an unknown dependency or a
duplicate task key is a clear error then, never at run time), and is immutable after.
Every model forbids unknown fields, so a misspelt field is an error, not a silent default.

The shape, as TOML (JSON is the same tree)::

    name = "etl"                 # a plain identifier
    description = "nightly load" # optional
    lease_seconds = 30           # optional: a worker's lease on a task, > 0

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
    lease_seconds = 120          # optional: overrides the workflow's
    [tasks.retry]                # optional: this task's whole policy (fields not given
    max_attempts = 5             # take RetryPolicy's defaults, not the workflow's)

:func:`load_definition` is the one entry point for user input (a mapping or a ``.toml`` /
``.json`` file): every failure, from a missing file to a cycle, is an
``InvalidWorkflowDefinitionError`` with one line per problem, each naming the file and the
field path, e.g. ``etl.toml: tasks[1].depends_on: unknown dependency 'c' of task 'b'
(known: a, b)``. Building the models directly raises pydantic's ``ValidationError`` (a
``ValueError``) with the same text.

Pure: nothing here does I/O except :func:`_read_file`, and only when the caller passes a
path to :func:`load_definition`.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from flowforge.aggregates import json_values
from flowforge.errors import InvalidWorkflowDefinitionError

#: The longest delay any field accepts (a year): anything longer is a typo, and the
#: bound keeps every ``timedelta`` and database interval built from it inside its range.
MAX_SECONDS = 365 * 24 * 3600.0
#: The longest lease (a week): a worker renews it every third of it, so a longer one
#: only delays the reaper after a crash.
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
#: Attempts are a 32-bit integer column; a policy that needs more is a loop, not a retry.
MAX_ATTEMPTS = 2**31 - 1
#: Growth per failure; past this the cap is reached on the second retry anyway.
MAX_BACKOFF_MULTIPLIER = 1000.0


def _problem(*lines: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``lines``, one problem per line.

    A plain ``ValueError`` would be shown as "Value error, ..."; this keeps the text
    the same whether it reaches the user through pydantic or ``load_definition``.
    """
    return PydanticCustomError(
        "invalid_workflow_definition", "{detail}", {"detail": "\n".join(lines)}
    )


def _plain_identifier(value: str) -> str:
    if not value.isidentifier():
        raise _problem(
            f"{value!r} is not a plain identifier "
            "(letters, digits and underscores, not starting with a digit)"
        )
    return value


def _valid_unicode(value: str) -> str:
    if problem := json_values.unicode_problem(value):
        raise _problem(problem)
    return value


#: Any text of a definition: stored as it is, so it must be valid Unicode.
Text = Annotated[str, AfterValidator(_valid_unicode)]
#: Keys, types and names end up in log lines, queue routing and CLI arguments.
Identifier = Annotated[str, AfterValidator(_valid_unicode), AfterValidator(_plain_identifier)]


class RetryPolicy(BaseModel):
    """How often a failed task is tried again, and how long to wait before each retry."""

    # Frozen: a definition is a value runs are created from; extra="forbid": a misspelt
    # field is an error; no inf/nan: they make nonsense delays and leases. Spelt out in
    # each class because the pydantic mypy plugin reads only a literal ConfigDict.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS, strict=True)
    backoff_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, strict=True)
    backoff_multiplier: float = Field(default=2.0, ge=1, le=MAX_BACKOFF_MULTIPLIER, strict=True)
    backoff_cap_seconds: float = Field(default=60.0, ge=0, le=MAX_SECONDS, strict=True)
    jitter: float = Field(default=0.1, ge=0, le=1, strict=True)

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

    key: Identifier
    type: Identifier
    depends_on: tuple[Text, ...] = ()
    #: ``None``: the workflow's policy.
    retry: RetryPolicy | None = None
    #: ``None``: the workflow's lease.
    lease_seconds: float | None = Field(default=None, gt=0, le=MAX_LEASE_SECONDS, strict=True)

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
            raise _problem(*problems)
        return depends_on


class WorkflowDefinition(BaseModel):
    """A validated DAG of tasks, with the defaults its tasks inherit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Identifier
    tasks: tuple[TaskDefinition, ...]
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    lease_seconds: float = Field(default=30.0, gt=0, le=MAX_LEASE_SECONDS, strict=True)
    description: Text = ""

    @field_validator("tasks")
    @classmethod
    def _not_empty(cls, tasks: tuple[TaskDefinition, ...]) -> tuple[TaskDefinition, ...]:
        if not tasks:
            raise _problem("a workflow needs at least one task")
        return tasks

    @model_validator(mode="after")
    def _is_a_dag(self) -> WorkflowDefinition:
        # All cross-task problems at once, so a user fixes a file in one round.
        if problems := _graph_problems(self.tasks):
            raise _problem(*problems)
        return self

    def task(self, key: str) -> TaskDefinition:
        """The task called ``key``; ``KeyError`` naming the known keys if there is none."""
        for task in self.tasks:
            if task.key == key:
                return task
        raise KeyError(f"no task {key!r} in workflow {self.name!r} (known: {_keys(self.tasks)})")

    def retry_policy_for(self, key: str) -> RetryPolicy:
        """The task's own policy, or else the workflow's."""
        retry = self.task(key).retry
        return retry if retry is not None else self.retry

    def lease_seconds_for(self, key: str) -> float:
        """The task's own lease, or else the workflow's."""
        lease = self.task(key).lease_seconds
        return lease if lease is not None else self.lease_seconds

    def topological_order(self) -> tuple[str, ...]:
        """Every task key, each after all its dependencies.

        Deterministic (Kahn's algorithm; among tasks that are ready together, the one
        defined first goes first), so runs of one definition list tasks identically.
        """
        return tuple(self.tasks[i].key for i in _kahn(self.tasks))

    def dependents(self, key: str) -> tuple[str, ...]:
        """The tasks that depend directly on ``key``, in definition order."""
        self.task(key)  # KeyError for an unknown key, rather than a silent ()
        return tuple(t.key for t in self.tasks if key in t.depends_on)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that ``WorkflowDefinition.model_validate`` turns back into
        an equal definition (how a run stores the definition it was created from)."""
        return self.model_dump(mode="json")


# --- graph checks ----------------------------------------------------------------------


def _keys(tasks: Sequence[TaskDefinition]) -> str:
    return ", ".join(dict.fromkeys(t.key for t in tasks))


def _graph_problems(tasks: Sequence[TaskDefinition]) -> list[str]:
    first_at: dict[str, int] = {}
    problems = []
    for i, task in enumerate(tasks):
        if task.key in first_at:
            problems.append(
                f"tasks[{i}].key: duplicate task key {task.key!r} "
                f"(also tasks[{first_at[task.key]}].key)"
            )
        first_at.setdefault(task.key, i)
    for i, task in enumerate(tasks):
        problems.extend(
            f"tasks[{i}].depends_on: unknown dependency {dependency!r} of task "
            f"{task.key!r} (known: {_keys(tasks)})"
            for dependency in task.depends_on
            if dependency not in first_at
        )
    # With duplicate keys an edge's end is ambiguous; the cycle check waits for the fix.
    if len(first_at) == len(tasks) and (cycle := _cycle(tasks)):
        path = " -> ".join(tasks[i].key for i in (*cycle, cycle[0]))
        problems.append(
            f"tasks[{cycle[0]}].depends_on: dependency cycle {path} "
            "(each task depends on the next)"
        )
    return problems


def _kahn(tasks: Sequence[TaskDefinition]) -> list[int]:
    """Indexes of the tasks in dependency order; tasks on or behind a cycle are left
    out. Unknown dependencies are ignored (they are reported separately)."""
    index = {task.key: i for i, task in enumerate(tasks)}
    waiting = [0] * len(tasks)
    dependents: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for dependency in task.depends_on:
            if dependency in index:
                waiting[i] += 1
                dependents[index[dependency]].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]  # sorted: a valid heap
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order


def _cycle(tasks: Sequence[TaskDefinition]) -> list[int]:
    """One dependency cycle (task indexes, each depending on the next), or ``[]``.

    Every task Kahn's algorithm could not order has a dependency it could not order
    either, so walking such dependencies must come back to a task already visited.
    The cycle starts at its earliest-defined task, so the message is deterministic.
    """
    stuck = set(range(len(tasks))) - set(_kahn(tasks))
    if not stuck:
        return []
    index = {task.key: i for i, task in enumerate(tasks)}
    visited: dict[int, int] = {}  # task index -> position in the walk
    walk: list[int] = []
    node = min(stuck)
    while node not in visited:
        visited[node] = len(walk)
        walk.append(node)
        node = next(index[d] for d in tasks[node].depends_on if index.get(d) in stuck)
    cycle = walk[visited[node] :]
    start = cycle.index(min(cycle))
    return cycle[start:] + cycle[:start]


# --- loading ---------------------------------------------------------------------------

Source = WorkflowDefinition | Mapping[str, Any] | str | os.PathLike[str]

_PARSERS: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    ".toml": ("TOML", tomllib.loads),
    ".json": ("JSON", json.loads),
}


def load_definition(source: Source) -> WorkflowDefinition:
    """A validated definition from a definition, a mapping, or a ``.toml``/``.json`` path.

    Every failure is an ``InvalidWorkflowDefinitionError``, one line per problem, each
    naming the file (if any) and the field path.
    """
    if isinstance(source, WorkflowDefinition):
        return source
    if isinstance(source, Mapping):
        return _validate(source, origin=None)
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        language, parse = _file_format(path)
        return _validate(_parse(path, language, parse, _read_file(path)), origin=path)
    raise InvalidWorkflowDefinitionError(
        "expected a WorkflowDefinition, a mapping or the path of a .toml or .json file, "
        f"got {type(source).__name__}"
    )


def _file_format(path: str) -> tuple[str, Callable[[str], Any]]:
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in _PARSERS:
        raise InvalidWorkflowDefinitionError(
            f"{path}: unsupported file type {suffix or '(no suffix)'!r}: use .toml or .json"
        )
    return _PARSERS[suffix.lower()]


def _read_file(path: str) -> str:
    """The file's text: the only I/O in this module, done because the caller asked.

    ``open`` rather than ``pathlib``: pathlib imports ``urllib``, which the pure core's
    import check forbids.
    """
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError as exc:
        raise InvalidWorkflowDefinitionError(f"{path}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise InvalidWorkflowDefinitionError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc
    except OSError as exc:
        raise InvalidWorkflowDefinitionError(
            f"{path}: cannot read the file: {exc.strerror or exc}"
        ) from exc


def _parse(path: str, language: str, parse: Callable[[str], Any], text: str) -> Mapping[str, Any]:
    try:
        data = parse(text)
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError; both name the line
        raise InvalidWorkflowDefinitionError(f"{path}: invalid {language}: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidWorkflowDefinitionError(
            f"{path}: the top level must be a {language} object, got {type(data).__name__}"
        )
    return data


def _validate(data: Mapping[str, Any], origin: str | None) -> WorkflowDefinition:
    try:
        return WorkflowDefinition.model_validate(dict(data))
    except ValidationError as exc:
        prefix = f"{origin}: " if origin else ""
        lines = [f"{prefix}{line}" for error in exc.errors() for line in _lines(error)]
        raise InvalidWorkflowDefinitionError("\n".join(lines)) from exc


def _lines(error: Mapping[str, Any]) -> list[str]:
    """One line per problem: ``field.path[i]: message``. The cross-task checks run on
    the whole model (an empty location) and put the field path in their own text."""
    path = _field_path(error["loc"])
    return [f"{path}: {line}" if path else line for line in error["msg"].splitlines()]


def _field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path
