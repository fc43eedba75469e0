"""The state machines, as data: a workflow run's, a task run's and a cron schedule's.

A :class:`StateMachine` is a table of :class:`Transition` rows, validated when it is
built: a bad table raises ``ValueError`` at import (so during test collection), never at
run time. Everything else (the aggregates, the SQL, the docs) reads these tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from flowforge import errors
from flowforge.aggregates.states import ScheduleState, TaskRunState, WorkflowRunState


@dataclass(frozen=True, slots=True)
class Transition:
    """One edge of a state machine."""

    name: str
    source: StrEnum
    target: StrEnum
    requires_lease: bool = False


class StateMachine:
    """A validated, immutable table of transitions over one enum of states."""

    def __init__(
        self,
        name: str,
        states: type[StrEnum],
        initial: StrEnum,
        terminal: Iterable[StrEnum],
        transitions: Iterable[Transition],
    ) -> None:
        self.name = name
        self.states = states
        self.initial = initial
        self.terminal = frozenset(terminal)
        self.transitions = tuple(transitions)
        _validate(self)
        self._by_name: Mapping[str, Transition] = MappingProxyType(
            {t.name: t for t in self.transitions}
        )

    def __iter__(self) -> Iterator[Transition]:
        return iter(self.transitions)

    def __len__(self) -> int:
        return len(self.transitions)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Transition:
        """The edge called ``name``; ``IllegalTransitionError`` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise errors.IllegalTransitionError(self.name, name) from None

    def edge(self, source: StrEnum, target: StrEnum) -> Transition | None:
        """The edge from ``source`` to ``target``, if the table has one."""
        for transition in self.transitions:
            if transition.source == source and transition.target == target:
                return transition
        return None

    def is_terminal(self, state: StrEnum) -> bool:
        return state in self.terminal

    def replay_problem(self, name: str, source: str, target: str) -> str | None:
        """Why a recorded change named ``name`` from ``source`` to ``target`` is not
        this table's edge of that name (None if it is).

        Replay checks the whole edge, not only its source: a forged or corrupted event
        that names a real edge but lands in another state must not rebuild a row the
        table could never have produced.
        """
        edge = self._by_name.get(name)
        if edge is None:
            return f"{name!r} is not a {self.name} transition"
        if (edge.source.value, edge.target.value) != (source, target):
            return (
                f"it records {source!r} -> {target!r}, but {name!r} is "
                f"{edge.source.value!r} -> {edge.target.value!r}"
            )
        return None


def _validate(machine: StateMachine) -> None:
    states = set(machine.states)

    def alien(state: StrEnum) -> bool:
        # isinstance, not membership: a StrEnum of another enum with the same value
        # compares equal to ours and would slip through an ``in`` check.
        return not isinstance(state, machine.states)

    foreign = [
        f"{t.name}: {s!r}" for t in machine.transitions for s in (t.source, t.target) if alien(s)
    ]
    foreign += [f"initial: {machine.initial!r}"] * alien(machine.initial)
    foreign += [f"terminal: {s!r}" for s in machine.terminal if alien(s)]
    if foreign:
        raise ValueError(f"{machine.name}: states not of {machine.states.__name__}: {foreign}")
    names = Counter(t.name for t in machine.transitions)
    if duplicates := sorted(n for n, c in names.items() if c > 1):
        raise ValueError(f"{machine.name}: duplicate transition names: {duplicates}")
    edges = Counter((t.source, t.target) for t in machine.transitions)
    if duplicate_edges := sorted(f"{s}->{t}" for (s, t), c in edges.items() if c > 1):
        raise ValueError(f"{machine.name}: duplicate edges: {duplicate_edges}")
    if out_of_terminal := [t.name for t in machine.transitions if t.source in machine.terminal]:
        raise ValueError(f"{machine.name}: edges out of a terminal state: {out_of_terminal}")
    sources = {t.source for t in machine.transitions}
    if dead_ends := sorted(str(s) for s in states - machine.terminal - sources):
        raise ValueError(
            f"{machine.name}: dead ends (non-terminal states with no way out): {dead_ends}"
        )


WORKFLOW_RUN_MACHINE = StateMachine(
    "WorkflowRun",
    WorkflowRunState,
    initial=WorkflowRunState.PENDING,
    terminal=(
        WorkflowRunState.SUCCEEDED,
        WorkflowRunState.FAILED,
        WorkflowRunState.CANCELLED,
    ),
    transitions=(
        Transition("start", WorkflowRunState.PENDING, WorkflowRunState.RUNNING),
        Transition("cancel_before_start", WorkflowRunState.PENDING, WorkflowRunState.CANCELLED),
        Transition("succeed", WorkflowRunState.RUNNING, WorkflowRunState.SUCCEEDED),
        Transition("fail", WorkflowRunState.RUNNING, WorkflowRunState.FAILED),
        Transition("cancel", WorkflowRunState.RUNNING, WorkflowRunState.CANCELLED),
    ),
)

_T = TaskRunState
TASK_RUN_MACHINE = StateMachine(
    "TaskRun",
    TaskRunState,
    initial=_T.PENDING,
    # FAILED is deliberately not terminal: a failed task is retryable by definition.
    terminal=(_T.SUCCEEDED, _T.CANCELLED),
    transitions=(
        Transition("dependencies_satisfied", _T.PENDING, _T.READY),
        Transition("cancel_pending", _T.PENDING, _T.CANCELLED),
        # Claiming is what acquires the lease, so it cannot require one.
        Transition("claim", _T.READY, _T.RUNNING),
        Transition("cancel_ready", _T.READY, _T.CANCELLED),
        Transition("succeed", _T.RUNNING, _T.SUCCEEDED, requires_lease=True),
        Transition("fail", _T.RUNNING, _T.FAILED, requires_lease=True),
        Transition("cancel_running", _T.RUNNING, _T.CANCELLED, requires_lease=True),
        # Reachable only through the reaper (reclaim_task_run).
        Transition("reap_lease", _T.RUNNING, _T.READY),
        Transition("schedule_retry", _T.FAILED, _T.RETRYING),
        Transition("retry_ready", _T.RETRYING, _T.READY),
        # FlowForge's extension of the spec's ten edges, in the spirit of its three
        # cancels: a run that ends ends every unfinished task in the same transaction,
        # including one waiting for a retry (docs/execution-model.md, "A run ends whole").
        Transition("cancel_failed", _T.FAILED, _T.CANCELLED),
        Transition("cancel_retrying", _T.RETRYING, _T.CANCELLED),
        # A rerun's task whose result is carried over from the run it reruns: created
        # pending and moved straight to succeeded, with the result and where it was
        # produced. Reachable only through the rerun, in the new run's creation
        # transaction (docs/execution-model.md, "Rerunning a run").
        Transition("carry_over", _T.PENDING, _T.SUCCEEDED),
    ),
)

#: The edge only the reaper may take.
REAPER_TRANSITION = TASK_RUN_MACHINE.get("reap_lease")
#: The edge only a rerun may take, when it creates its run.
CARRY_OVER_TRANSITION = TASK_RUN_MACHINE.get("carry_over")
#: The edges that spend a lease: only ``finish_task_run`` takes them.
FINISH_TRANSITIONS = frozenset(t.name for t in TASK_RUN_MACHINE if t.requires_lease)

_S = ScheduleState
#: A cron schedule (``flowforge schedule``; docs/scheduling/cron.md). Its fires are not
#: edges: a fire leaves it active (``Schedule.Fired``, like a task's heartbeat).
SCHEDULE_MACHINE = StateMachine(
    "Schedule",
    ScheduleState,
    initial=_S.ACTIVE,
    terminal=(_S.DELETED,),
    transitions=(
        Transition("pause", _S.ACTIVE, _S.PAUSED),
        Transition("resume", _S.PAUSED, _S.ACTIVE),
        Transition("delete", _S.ACTIVE, _S.DELETED),
        Transition("delete_paused", _S.PAUSED, _S.DELETED),
    ),
)
